#include "pluginLogger.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace trt_woq
{
namespace plugin
{
namespace
{
std::mutex gMutex;
nvinfer1::ILoggerFinder* gFinder{nullptr};
nvinfer1::ILogger* gLogger{nullptr};

char const* severityName(nvinfer1::ILogger::Severity s) noexcept
{
    switch (s)
    {
    case nvinfer1::ILogger::Severity::kINTERNAL_ERROR: return "INTERNAL_ERROR";
    case nvinfer1::ILogger::Severity::kERROR: return "ERROR";
    case nvinfer1::ILogger::Severity::kWARNING: return "WARNING";
    case nvinfer1::ILogger::Severity::kINFO: return "INFO";
    case nvinfer1::ILogger::Severity::kVERBOSE: return "VERBOSE";
    }
    return "?";
}
} // namespace

bool traceEnabled() noexcept
{
    static bool const enabled = [] {
        char const* v = std::getenv("TRT_WOQ_PLUGIN_TRACE");
        return v != nullptr && *v != '\0' && *v != '0';
    }();
    return enabled;
}

void trace(char const* entryPoint) noexcept
{
    std::fprintf(stderr, "[trt_woq trace] %s\n", entryPoint);
    std::fflush(stderr);
}

void setLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept
{
    std::lock_guard<std::mutex> lock(gMutex);
    gFinder = finder;
    gLogger = nullptr;
}

void log(nvinfer1::ILogger::Severity severity, std::string const& message) noexcept
{
    nvinfer1::ILogger* logger{nullptr};
    try
    {
        std::lock_guard<std::mutex> lock(gMutex);
        if (gLogger == nullptr && gFinder != nullptr)
        {
            gLogger = gFinder->findLogger();
        }
        logger = gLogger;
    }
    catch (...)
    {
        logger = nullptr;
    }
    // TRT_WOQ_PLUGIN_LOG_STDERR=1 also copies every message to stderr (used by the TensorRT-RTX check to see our
    // messages even where the host's logger drops them).
    static bool const alsoStderr = std::getenv("TRT_WOQ_PLUGIN_LOG_STDERR") != nullptr;
    if (logger == nullptr || alsoStderr)
    {
        if (severity <= nvinfer1::ILogger::Severity::kWARNING || alsoStderr)
        {
            std::fprintf(stderr, "[trt_woq plugin %s] %s\n", severityName(severity), message.c_str());
        }
    }
    if (logger != nullptr)
    {
        logger->log(severity, message.c_str());
    }
}

} // namespace plugin
} // namespace trt_woq
