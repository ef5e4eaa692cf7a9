/*
 * The two C entry points TensorRT looks for in a plugin library (IPluginRegistry::loadLibrary, trtexec
 * --staticPlugins, polygraphy --plugins): getCreators() hands out the creators, setLoggerFinder() gives us
 * TensorRT's logger. Nothing here links libnvinfer.
 */
#include "pluginLogger.h"
#include "../weight_only_conv/weightOnlyConvPlugin.h"
#include "weightOnlyLinearPlugin.h"

#if defined(_WIN32)
#define TRT_WOQ_PLUGIN_EXPORT __declspec(dllexport)
#else
#define TRT_WOQ_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

extern "C"
{

TRT_WOQ_PLUGIN_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    TRT_WOQ_TRACE("setLoggerFinder");
    trt_woq::plugin::setLoggerFinder(finder);
}

TRT_WOQ_PLUGIN_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    TRT_WOQ_TRACE("getCreators");
    static trt_woq::plugin::WeightOnlyLinearPluginCreator weightOnlyLinearCreator;
    static trt_woq::plugin::WeightOnlyConvPluginCreator weightOnlyConvCreator;
    static nvinfer1::IPluginCreatorInterface* const creators[] = {&weightOnlyLinearCreator, &weightOnlyConvCreator};
    nbCreators = static_cast<int32_t>(sizeof(creators) / sizeof(creators[0]));
    return creators;
}

} // extern "C"
