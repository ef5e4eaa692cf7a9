"""Finding ``libtrt_woq_plugin.so`` and registering it with TensorRT.

    from trt_woq.plugin import load_plugin
    info = load_plugin()          # finds the library, registers it with TensorRT if tensorrt is importable
    print(info.path, info.registered)

The library is looked up by :func:`trt_woq._libs.find_library`: ``$TRT_WOQ_PLUGIN_PATH`` if set, else the copy that
``pip install .`` puts in ``trt_woq/lib``. The same file works with ``trtexec --staticPlugins=PATH`` and
``polygraphy run --plugins PATH`` (both call its exported ``getCreators`` / ``setLoggerFinder``).

TensorRT is imported only here and only when needed. ``POLYGRAPHY_USE_TENSORRT_RTX=1`` (polygraphy's own switch) or
``TRT_WOQ_TENSORRT_MODULE=tensorrt_rtx`` selects TensorRT-RTX instead of TensorRT.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from trt_woq._libs import LibraryNotFoundError, find_library
from trt_woq.errors import PluginLibraryNotFoundError, PluginLoadError, TensorRTNotFoundError

PLUGIN_LIBRARY = "libtrt_woq_plugin.so"
PLUGIN_PATH_ENV = "TRT_WOQ_PLUGIN_PATH"
PLUGIN_NAME = "WeightOnlyLinear"
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = ""

_lock = threading.Lock()
_registered: dict[tuple[str, int], object] = {}  # (library path, id(registry)) -> handle


def tensorrt_module_name() -> str:
    """``tensorrt``, or ``tensorrt_rtx`` when selected through the environment (see the module docstring)."""
    name = os.environ.get("TRT_WOQ_TENSORRT_MODULE")
    if name:
        return name
    if os.environ.get("POLYGRAPHY_USE_TENSORRT_RTX", "0") not in ("", "0"):
        return "tensorrt_rtx"
    return "tensorrt"


def import_tensorrt():
    """The TensorRT Python module, or :class:`TensorRTNotFoundError` saying how to get one."""
    name = tensorrt_module_name()
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise TensorRTNotFoundError(
            f"TensorRT is not available: `import {name}` failed ({exc}). Install TensorRT's Python package "
            f"(pip install tensorrt, matching your CUDA) on a machine with an NVIDIA GPU, or build engines with "
            f"trtexec --onnx=MODEL --staticPlugins={PLUGIN_LIBRARY}.") from None


def plugin_library_path() -> Path:
    """Path of the plugin library, or :class:`PluginLibraryNotFoundError` saying how to provide it."""
    try:
        return find_library(PLUGIN_LIBRARY, PLUGIN_PATH_ENV)
    except LibraryNotFoundError as exc:
        raise PluginLibraryNotFoundError(
            f"the WeightOnlyLinear TensorRT plugin library is not available: {exc}. It is built by `pip install .` "
            f"when nvcc and TensorRT's headers are found (TENSORRT_INCLUDE_DIR), or by CMake "
            f"(target trt_woq_plugin).") from None


@dataclass(frozen=True)
class PluginInfo:
    """Where the library is, and whether it is registered with TensorRT in this process (and why not)."""

    path: Path
    registered: bool
    tensorrt: str | None = None  # module name and version it is registered with
    reason: str = ""


def _find_creator(registry):
    for getter in ("get_creator", "get_plugin_creator"):
        fn = getattr(registry, getter, None)
        if fn is not None:
            try:
                creator = fn(PLUGIN_NAME, PLUGIN_VERSION, PLUGIN_NAMESPACE)
            except TypeError:
                continue
            if creator is not None:
                return creator
    return None


def load_plugin(path: str | os.PathLike | None = None, *, registry=None, require_tensorrt: bool = False) -> PluginInfo:
    """Find the plugin library and register it with TensorRT's plugin registry when TensorRT is importable.

    ``path`` overrides the lookup. ``registry`` is a TensorRT ``IPluginRegistry`` (default: the global one of the
    selected TensorRT module). Without TensorRT the library is only located, and ``registered`` is False with the
    reason, unless ``require_tensorrt`` (then :class:`TensorRTNotFoundError`). Registering twice is a no-op.
    """
    lib = Path(path) if path is not None else plugin_library_path()
    if not lib.is_file():
        raise PluginLibraryNotFoundError(f"{lib}: no such file (the WeightOnlyLinear plugin library)")
    lib = lib.resolve()
    if registry is None:
        try:
            trt = import_tensorrt()
        except TensorRTNotFoundError as exc:
            if require_tensorrt:
                raise
            return PluginInfo(lib, False, None, str(exc))
        registry = trt.get_plugin_registry()
        module = f"{trt.__name__} {getattr(trt, '__version__', '?')}"
    else:
        module = type(registry).__module__
    key = (str(lib), id(registry))
    with _lock:
        if key not in _registered:
            try:
                handle = registry.load_library(str(lib))
            except Exception as exc:  # TensorRT raises RuntimeError/TypeError subclasses depending on version
                raise PluginLoadError(f"TensorRT could not load {lib}: {exc}") from None
            if handle is None:
                raise PluginLoadError(f"TensorRT could not load {lib} (load_library returned None; run with a "
                                      f"VERBOSE TensorRT logger for the dlopen error)")
            if _find_creator(registry) is None:
                raise PluginLoadError(f"{lib} loaded, but TensorRT's registry has no {PLUGIN_NAME} version "
                                      f"{PLUGIN_VERSION} creator: is this the trt_woq plugin library?")
            _registered[key] = handle
    return PluginInfo(lib, True, module)
