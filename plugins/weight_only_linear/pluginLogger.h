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

// TRT_WOQ_PLUGIN_TRACE=1 in the environment prints every entry point TensorRT calls, straight to stderr (unbuffered,
// no logger involved): the last line before a crash in the host names the call it was in.
bool traceEnabled() noexcept;
void trace(char const* entryPoint) noexcept;
#define TRT_WOQ_TRACE(entryPoint)                                                                                      \
    do                                                                                                                 \
    {                                                                                                                  \
        if (::trt_woq::plugin::traceEnabled())                                                                         \
        {                                                                                                              \
            ::trt_woq::plugin::trace(entryPoint);                                                                      \
        }                                                                                                              \
    } while (0)

} // namespace plugin
} // namespace trt_woq

#endif // TRT_WOQ_PLUGIN_LOGGER_H
