/*
 * libtrt_woq_polygraphy.so: an adapter for plugin loaders that only dlopen() a library and expect it to register
 * itself (polygraphy --plugins, ctypes.CDLL). libtrt_woq_plugin.so does not self-register: it links no TensorRT
 * library, and registering from a load-time constructor would re-enter TensorRT's registry when TensorRT itself
 * loads it through IPluginRegistry::loadLibrary. This adapter is never loaded by TensorRT. When dlopen()ed inside
 * a Python process it runs, under the GIL,
 *
 *     trt_woq.plugin.load_plugin("<this folder>/libtrt_woq_plugin.so", require_tensorrt=True)
 *
 * which registers the real plugin library through the TensorRT Python module that trt_woq selects (tensorrt, or
 * tensorrt_rtx with POLYGRAPHY_USE_TENSORRT_RTX=1, as polygraphy does). Outside Python it prints what to use
 * instead and does nothing. It links nothing but libc / libdl: the Python C API is looked up with dlsym.
 */
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace
{

using PyIsInitializedFn = int (*)();
using PyGILStateEnsureFn = int (*)();
using PyGILStateReleaseFn = void (*)(int);
using PyRunSimpleStringFn = int (*)(char const*);

std::string thisFolder()
{
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&thisFolder), &info) == 0 || info.dli_fname == nullptr)
    {
        return ".";
    }
    std::string path = info.dli_fname;
    size_t const slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

__attribute__((constructor)) void registerThroughPython()
{
    if (std::getenv("TRT_WOQ_NO_AUTOLOAD") != nullptr)
    {
        return;
    }
    auto isInitialized = reinterpret_cast<PyIsInitializedFn>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    auto ensure = reinterpret_cast<PyGILStateEnsureFn>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
    auto release = reinterpret_cast<PyGILStateReleaseFn>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
    auto run = reinterpret_cast<PyRunSimpleStringFn>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
    if (isInitialized == nullptr || ensure == nullptr || release == nullptr || run == nullptr || !isInitialized())
    {
        std::fprintf(stderr,
            "[trt_woq] libtrt_woq_polygraphy.so is an adapter for Python tools that only dlopen plugin libraries; "
            "this process is not Python. Load libtrt_woq_plugin.so with IPluginRegistry::loadLibrary (trtexec "
            "--staticPlugins) instead.\n");
        return;
    }
    std::string const folder = thisFolder();
    // Installed as <site-packages>/trt_woq/lib/: <site-packages> makes `import trt_woq` work if it does not already.
    std::string const code = "import sys\n"
                             "try:\n"
                             "    from trt_woq.plugin import load_plugin\n"
                             "except ImportError:\n"
                             "    sys.path.append(r'''"
        + folder + "/../..''')\n"
                   "    from trt_woq.plugin import load_plugin\n"
                   "_info = load_plugin(r'''"
        + folder + "/libtrt_woq_plugin.so''', require_tensorrt=True)\n"
                   "print(f'[trt_woq] registered {_info.path} with {_info.tensorrt}', file=sys.stderr)\n"
                   "del _info\n";
    int const state = ensure();
    int const rc = run(code.c_str());
    release(state);
    if (rc != 0)
    {
        std::fprintf(stderr,
            "[trt_woq] libtrt_woq_polygraphy.so could not register libtrt_woq_plugin.so (the Python error is "
            "above); is the trt_woq package importable?\n");
    }
}

} // namespace
