/*
 * Logging through the logger of the TensorRT that loaded this library: TensorRT calls the exported
 * setLoggerFinder() when it loads the library (IPluginRegistry::loadLibrary, trtexec --staticPlugins, polygraphy
 * --plugins); until it does, or when it finds no logger, messages go to stderr.
 */
#ifndef TRT_WOQ_PLUGIN_LOGGER_H
#define TRT_WOQ_PLUGIN_LOGGER_H

#include <NvInferRuntime.h>

#include <string>

namespace trt_woq
{
namespace plugin
{

void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;
void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept;
inline void logError(std::string const& message) noexcept { log(nvinfer1::ILogger::Severity::kERROR, message); }
inline void logWarning(std::string const& message) noexcept { log(nvinfer1::ILogger::Severity::kWARNING, message); }
inline void logVerbose(std::string const& message) noexcept { log(nvinfer1::ILogger::Severity::kVERBOSE, message); }

} // namespace plugin
} // namespace trt_woq

#endif // TRT_WOQ_PLUGIN_LOGGER_H
