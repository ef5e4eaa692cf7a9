"""Running a TensorRT engine that holds WeightOnlyLinear layers, with cuda-python (``cuda.bindings``) buffers and
stream; no pycuda, no torch.

    from trt_woq.runtime import EngineRunner
    with EngineRunner("model.engine") as runner:
        outputs = runner.infer({"input_ids": ids})     # dict name -> numpy array, on the host

The plugin library is registered before the engine is deserialized (the engine stores the plugin's fields and
TensorRT re-creates it through our creator). BF16 tensors travel as float32 on the host: inputs are rounded to
bfloat16 and outputs widened back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

from trt_woq.errors import CudaError, EngineBuildError, TrtWoqError
from trt_woq.plugin import import_tensorrt, load_plugin


def _cudart():
    """The CUDA runtime module of cuda-python (``cuda.bindings.runtime``, or ``cuda.cudart`` before 12.6)."""
    try:
        from cuda.bindings import runtime
        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart
        return cudart
    except ImportError as exc:
        raise CudaError(f"cuda-python is not available ({exc}): pip install cuda-python") from None


def check(result, what: str = "CUDA call"):
    """Unpack a cuda-python ``(error, *values)`` result; raise :class:`CudaError` naming the call on failure."""
    cudart = _cudart()
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if err != cudart.cudaError_t.cudaSuccess:
        name = cudart.cudaGetErrorName(err)
        name = name[1].decode() if isinstance(name, tuple) else str(err)
        raise CudaError(f"{what} failed: {name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


class Stream:
    """A non-blocking CUDA stream."""

    def __init__(self):
        cudart = _cudart()
        self.handle = check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreate")

    def __int__(self) -> int:
        return int(self.handle)

    def synchronize(self) -> None:
        check(_cudart().cudaStreamSynchronize(self.handle), "cudaStreamSynchronize")

    def close(self) -> None:
        if self.handle is not None:
            check(_cudart().cudaStreamDestroy(self.handle), "cudaStreamDestroy")
            self.handle = None


class DeviceBuffer:
    """``nbytes`` of device memory (cudaMalloc), grown on demand, with async copies on a :class:`Stream`."""

    def __init__(self, nbytes: int = 0):
        self.ptr = 0
        self.nbytes = 0
        self.reserve(nbytes)

    def reserve(self, nbytes: int) -> None:
        if nbytes <= self.nbytes:
            return
        self.free()
        self.ptr = int(check(_cudart().cudaMalloc(max(int(nbytes), 1)), f"cudaMalloc({nbytes})"))
        self.nbytes = int(nbytes)

    def copy_from(self, host: np.ndarray, stream: Stream) -> None:
        host = np.ascontiguousarray(host)
        self.reserve(host.nbytes)
        cudart = _cudart()
        check(cudart.cudaMemcpyAsync(self.ptr, host.ctypes.data, host.nbytes,
                                     cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, stream.handle),
              "cudaMemcpyAsync host->device")

    def copy_to(self, host: np.ndarray, stream: Stream) -> np.ndarray:
        if not host.flags.c_contiguous or host.nbytes > self.nbytes:
            raise TrtWoqError("copy_to needs a contiguous host array no larger than the buffer")
        cudart = _cudart()
        check(cudart.cudaMemcpyAsync(host.ctypes.data, self.ptr, host.nbytes,
                                     cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream.handle),
              "cudaMemcpyAsync device->host")
        return host

    def free(self) -> None:
        if self.ptr:
            check(_cudart().cudaFree(self.ptr), "cudaFree")
            self.ptr = 0
            self.nbytes = 0


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even); the uint16 storage bits."""
    f = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_float32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


class EngineRunner:
    """Deserializes an engine (bytes or a file) and runs it on host numpy arrays.

    ``infer(feeds)`` sets every input's shape from its array, copies inputs in, enqueues
    (``execute_async_v3``) on this runner's stream, copies every output back and returns them by name.
    """

    def __init__(self, engine: bytes | str | os.PathLike, *, plugin_path: str | os.PathLike | None = None,
                 verbose: bool = False):
        self._trt = trt = import_tensorrt()
        load_plugin(plugin_path, require_tensorrt=True)
        data = Path(engine).read_bytes() if isinstance(engine, (str, os.PathLike)) else bytes(engine)
        self._logger = trt.Logger(trt.Logger.VERBOSE if verbose else trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self.engine = self._runtime.deserialize_cuda_engine(data)
        if self.engine is None:
            raise EngineBuildError("TensorRT could not deserialize the engine (built by another TensorRT version or "
                                   "for another GPU? see the messages above)")
        self.context = self.engine.create_execution_context()
        if self.context is None:
            raise EngineBuildError("TensorRT could not create an execution context")
        self.stream = Stream()
        self._buffers: dict[str, DeviceBuffer] = {}
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]

    def _host_dtype(self, name: str) -> tuple[np.dtype, bool]:
        """(numpy dtype on the host, is bf16) of tensor ``name``."""
        trt = self._trt
        dt = self.engine.get_tensor_dtype(name)
        if hasattr(trt.DataType, "BF16") and dt == trt.DataType.BF16:
            return np.dtype(np.float32), True
        return np.dtype(trt.nptype(dt)), False

    def input_metadata(self) -> dict[str, tuple[np.dtype, tuple]]:
        """name -> (host dtype, shape with -1 for dynamic dims) of every input."""
        return {n: (self._host_dtype(n)[0], tuple(self.engine.get_tensor_shape(n))) for n in self.inputs}

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise TrtWoqError(f"missing inputs: {', '.join(missing)} (the engine's inputs are "
                              f"{', '.join(self.inputs)})")
        keep = []  # host arrays must live until the copies are done
        for name in self.inputs:
            dtype, bf16 = self._host_dtype(name)
            host = np.ascontiguousarray(feeds[name], dtype)
            if bf16:
                host = float32_to_bf16_bits(host)
            if not self.context.set_input_shape(name, tuple(host.shape)):
                raise TrtWoqError(f"input {name}: shape {list(host.shape)} is outside the engine's profile "
                                  f"{list(self.engine.get_tensor_shape(name))}")
            buf = self._buffers.setdefault(name, DeviceBuffer())
            buf.copy_from(host, self.stream)
            keep.append(host)
            self.context.set_tensor_address(name, buf.ptr)
        results = {}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise TrtWoqError(f"output {name} has a data-dependent shape {list(shape)}; not supported here")
            dtype, bf16 = self._host_dtype(name)
            host = np.empty(shape, np.uint16 if bf16 else dtype)
            buf = self._buffers.setdefault(name, DeviceBuffer())
            buf.reserve(host.nbytes)
            self.context.set_tensor_address(name, buf.ptr)
            results[name] = (host, buf, bf16)
        if not self.context.execute_async_v3(int(self.stream)):
            raise TrtWoqError("execute_async_v3 failed (see TensorRT's messages)")
        for host, buf, _ in results.values():
            buf.copy_to(host, self.stream)
        self.stream.synchronize()
        return {name: (bf16_bits_to_float32(h) if bf16 else h) for name, (h, _, bf16) in results.items()}

    def close(self) -> None:
        for buf in self._buffers.values():
            buf.free()
        self._buffers.clear()
        if getattr(self, "stream", None) is not None:
            self.stream.close()
            self.stream = None
        self.context = None
        self.engine = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
