"""User-facing errors of the trt_woq runtime. The CLI (``python -m trt_woq``) catches :class:`TrtWoqError` by
name and prints its message without a traceback, so every message says what is missing and how to fix it."""

from __future__ import annotations


class TrtWoqError(RuntimeError):
    """Base of every error a user can act on (missing TensorRT, missing plugin library, a build that failed)."""


class TensorRTNotFoundError(TrtWoqError):
    """The ``tensorrt`` Python package (or ``tensorrt_rtx``) cannot be imported."""


class PluginLibraryNotFoundError(TrtWoqError):
    """``libtrt_woq_plugin.so`` is neither installed in the package nor named by ``TRT_WOQ_PLUGIN_PATH``."""


class PluginLoadError(TrtWoqError):
    """TensorRT could not load the plugin library, or it loaded but the WeightOnlyLinear creator is not registered."""


class EngineBuildError(TrtWoqError):
    """Parsing the ONNX file or building the engine failed; the message carries TensorRT's errors."""


class CudaError(TrtWoqError):
    """A CUDA runtime call (through cuda-python) failed, or cuda-python is missing."""
