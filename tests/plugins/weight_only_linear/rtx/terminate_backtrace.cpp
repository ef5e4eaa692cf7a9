// LD_PRELOAD helper for the TensorRT-RTX build check: prints a native backtrace to stderr when the process calls
// std::terminate or gets SIGABRT / SIGSEGV, so that a "terminate called without an active exception" names the
// library and offset it came from (map offsets with addr2line / objdump against the same library file).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <execinfo.h>
#include <unistd.h>

namespace
{
void dump(char const* why)
{
    void* frames[96];
    int const n = backtrace(frames, 96);
    std::fprintf(stderr, "[terminate_backtrace] %s, %d frames:\n", why, n);
    std::fflush(stderr);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
}

void onTerminate()
{
    dump(std::current_exception() ? "std::terminate with an active exception" : "std::terminate, no active exception");
    std::signal(SIGABRT, SIG_DFL);
    std::abort();
}

void onSignal(int sig)
{
    dump(sig == SIGABRT ? "SIGABRT" : "SIGSEGV");
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}

__attribute__((constructor)) void install()
{
    std::set_terminate(onTerminate);
    std::signal(SIGABRT, onSignal);
    std::signal(SIGSEGV, onSignal);
}
} // namespace
