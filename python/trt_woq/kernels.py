"""Thin ctypes wrapper over the kernels' C ABI (``plugins/kernels/include/trt_woq/kernels.h``).

Operands are device pointers (plain ints, or anything ``int()`` accepts, such as cuda-python handles); the stream is a
``cudaStream_t`` from ``cuda.bindings.runtime`` (or its int value, 0 = legacy default stream). Nothing here allocates
or copies: tests and the benchmark bring their own buffers (torch there; this module never imports torch).

    from trt_woq import kernels
    lib = kernels.load()                        # finds libtrt_woq_kernels.so (TRT_WOQ_KERNELS_PATH overrides)
    lib.linear(x=..., packed_weight=..., scales=..., output=..., m=1, n=4096, k=4096, bits=4, group_size=128,
               act="fp16", stream=stream)

A status other than OK raises :class:`KernelError`, whose message names the call, m, n, k and the options.
``cuda.bindings`` is imported only where the device's compute capability is needed (``supports``/``dispatch``
without an explicit ``sm``).
"""

from __future__ import annotations

import ctypes
import enum
import functools
from pathlib import Path

from trt_woq._libs import find_library

LIBRARY_NAME = "libtrt_woq_kernels.so"
PATH_ENV = "TRT_WOQ_KERNELS_PATH"
ABI_VERSION = 1
CANDIDATE_AUTO = -1


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED_SHAPE = 2
    UNSUPPORTED_ARCH = 3
    WORKSPACE = 4
    CUDA = 5


class Act(enum.IntEnum):
    FP16 = 0
    BF16 = 1


class KernelError(RuntimeError):
    """A kernel entry point returned a failure status (``.status``)."""

    def __init__(self, message: str, status: Status):
        super().__init__(message)
        self.status = status


class KernelLibraryError(RuntimeError):
    """The kernels library or cuda-python could not be loaded; the message says how to provide it."""


class LinearParams(ctypes.Structure):
    """Mirror of ``trt_woq_linear_params`` (field order and types must match kernels.h)."""

    _fields_ = [
        ("activation", ctypes.c_void_p),
        ("packed_weight", ctypes.c_void_p),
        ("scales", ctypes.c_void_p),
        ("zeros", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("output", ctypes.c_void_p),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("bits", ctypes.c_int32),
        ("group_size", ctypes.c_int32),
        ("layout_version", ctypes.c_int32),
        ("act_type", ctypes.c_int),  # C enum: int-sized
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
    ]

    def describe(self) -> str:
        group = "per-channel" if self.group_size == -1 else f"g{self.group_size}"
        return (f"m={self.m}, n={self.n}, k={self.k}, INT{self.bits} {group}, {Act(self.act_type).name.lower()}"
                f"{', zeros' if self.zeros else ''}{', bias' if self.bias else ''}, layout v{self.layout_version}")


def _pointer(value) -> int:
    """A device pointer or stream as an int: None -> 0; ints as is; cuda-python handles through int()."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except TypeError:
        getptr = getattr(value, "getPtr", None)
        if getptr is None:
            raise TypeError(f"cannot use {type(value).__name__} as a device pointer or stream") from None
        return int(getptr())


def _act(act) -> Act:
    if isinstance(act, str):
        try:
            return Act[act.upper()]
        except KeyError:
            raise ValueError(f"act must be 'fp16' or 'bf16', got {act!r}") from None
    return Act(act)


def make_params(*, m: int, n: int, k: int, bits: int, group_size: int, act="fp16", x=None, packed_weight=None,
                scales=None, zeros=None, bias=None, output=None, workspace=None, workspace_size: int = 0,
                layout_version: int = 1) -> LinearParams:
    """Build a params struct; pointers may be omitted for the size-only queries (supports, dispatch, workspace)."""
    return LinearParams(_pointer(x), _pointer(packed_weight), _pointer(scales), _pointer(zeros), _pointer(bias),
                        _pointer(output), m, n, k, bits, group_size, layout_version, int(_act(act)),
                        _pointer(workspace), workspace_size)


def device_sm(device: int | None = None) -> int:
    """Compute capability (e.g. 90) of ``device`` (default: the current one), through cuda.bindings.runtime."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError as e:
        raise KernelLibraryError(
            "cuda-python is needed to query the GPU (pip install 'cuda-python>=12.6', or install trt-woq[cuda]); "
            "or pass sm= explicitly") from e
    if device is None:
        err, device = cudart.cudaGetDevice()
        _check_cudart(err, "cudaGetDevice")
    err, major = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrComputeCapabilityMajor, device)
    _check_cudart(err, "cudaDeviceGetAttribute")
    err, minor = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrComputeCapabilityMinor, device)
    _check_cudart(err, "cudaDeviceGetAttribute")
    return 10 * major + minor


def _check_cudart(err, what: str) -> None:
    if int(err) != 0:
        raise KernelLibraryError(f"{what} failed: {err!r} (is a CUDA GPU visible?)")


class Kernels:
    """The loaded library. Create through :func:`load` (cached) or directly with an explicit path."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            path = find_library(LIBRARY_NAME, PATH_ENV)
        self.path = Path(path)
        try:
            lib = ctypes.CDLL(str(self.path))
        except OSError as e:
            raise KernelLibraryError(f"cannot load {self.path}: {e} (set {PATH_ENV} to a working build)") from e
        pp = ctypes.POINTER(LinearParams)
        lib.trt_woq_linear_candidate_count.argtypes = []
        lib.trt_woq_linear_candidate_count.restype = ctypes.c_int32
        lib.trt_woq_linear_candidate_describe.argtypes = [ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]
        lib.trt_woq_linear_candidate_describe.restype = ctypes.c_int
        lib.trt_woq_linear_candidate_supports.argtypes = [ctypes.c_int32, pp, ctypes.c_int32]
        lib.trt_woq_linear_candidate_supports.restype = ctypes.c_int
        lib.trt_woq_linear_dispatch.argtypes = [pp, ctypes.c_int32]
        lib.trt_woq_linear_dispatch.restype = ctypes.c_int32
        lib.trt_woq_linear_workspace_size.argtypes = [ctypes.c_int32, pp, ctypes.c_int32]
        lib.trt_woq_linear_workspace_size.restype = ctypes.c_size_t
        lib.trt_woq_linear_run.argtypes = [ctypes.c_int32, pp, ctypes.c_void_p]
        lib.trt_woq_linear_run.restype = ctypes.c_int
        lib.trt_woq_status_string.argtypes = [ctypes.c_int]
        lib.trt_woq_status_string.restype = ctypes.c_char_p
        lib.trt_woq_last_cuda_error.argtypes = []
        lib.trt_woq_last_cuda_error.restype = ctypes.c_char_p
        self._lib = lib

    # ---- candidates ----
    def candidate_count(self) -> int:
        return int(self._lib.trt_woq_linear_candidate_count())

    def candidate_name(self, candidate: int) -> str:
        buf = ctypes.create_string_buffer(128)
        self._check(self._lib.trt_woq_linear_candidate_describe(candidate, buf, len(buf)),
                    f"candidate_describe({candidate})")
        return buf.value.decode()

    def candidates(self) -> list[str]:
        return [self.candidate_name(i) for i in range(self.candidate_count())]

    def supports(self, candidate: int, params: LinearParams, sm: int | None = None) -> Status:
        """The candidate's answer for these sizes as a Status (OK or the reason); never raises for a refusal."""
        sm = device_sm() if sm is None else sm
        return Status(self._lib.trt_woq_linear_candidate_supports(candidate, ctypes.byref(params), sm))

    def dispatch(self, params: LinearParams, sm: int | None = None) -> int:
        """The candidate id the built-in dispatch picks, or -1 when none supports the problem."""
        sm = device_sm() if sm is None else sm
        return int(self._lib.trt_woq_linear_dispatch(ctypes.byref(params), sm))

    def workspace_size(self, params: LinearParams, candidate: int = CANDIDATE_AUTO, sm: int | None = None) -> int:
        sm = device_sm() if sm is None else sm
        return int(self._lib.trt_woq_linear_workspace_size(candidate, ctypes.byref(params), sm))

    # ---- launch ----
    def run(self, params: LinearParams, stream=None, candidate: int = CANDIDATE_AUTO) -> None:
        """Enqueue on ``stream``; raises KernelError naming m, n, k on any failure status."""
        status = self._lib.trt_woq_linear_run(candidate, ctypes.byref(params), _pointer(stream))
        if status != Status.OK:
            which = "auto" if candidate == CANDIDATE_AUTO else self._safe_name(candidate)
            self._check(status, f"trt_woq_linear_run(candidate {which}; {params.describe()})")

    def linear(self, *, x, packed_weight, scales, output, m: int, n: int, k: int, bits: int, group_size: int,
               act="fp16", zeros=None, bias=None, workspace=None, workspace_size: int = 0, stream=None,
               candidate: int = CANDIDATE_AUTO) -> None:
        """Y[m, n] = X[m, k] @ dequant(W) (+ bias) on device pointers; see kernels.h for shapes."""
        params = make_params(m=m, n=n, k=k, bits=bits, group_size=group_size, act=act, x=x,
                             packed_weight=packed_weight, scales=scales, zeros=zeros, bias=bias, output=output,
                             workspace=workspace, workspace_size=workspace_size)
        self.run(params, stream=stream, candidate=candidate)

    # ---- errors ----
    def status_string(self, status: int) -> str:
        return self._lib.trt_woq_status_string(int(status)).decode()

    def last_cuda_error(self) -> str:
        return self._lib.trt_woq_last_cuda_error().decode()

    def _safe_name(self, candidate: int) -> str:
        try:
            return f"{candidate} {self.candidate_name(candidate)}"
        except KernelError:
            return str(candidate)

    def _check(self, status: int, what: str) -> None:
        if status == Status.OK:
            return
        try:
            st = Status(status)
        except ValueError:
            raise KernelError(f"{what}: unknown status {status}", Status.INVALID_ARGUMENT) from None
        text = self.status_string(st)
        if st == Status.CUDA or st == Status.UNSUPPORTED_ARCH:
            cuda_err = self.last_cuda_error()
            if cuda_err:
                text += f" [{cuda_err}]"
        raise KernelError(f"{what}: {st.name}: {text}", st)


@functools.lru_cache(maxsize=None)
def _load_cached(path: str | None) -> Kernels:
    return Kernels(path)


def load(path: str | Path | None = None) -> Kernels:
    """The library at ``path``, or found by ``trt_woq._libs.find_library`` ($TRT_WOQ_KERNELS_PATH first)."""
    if path is None:
        return _load_cached(str(find_library(LIBRARY_NAME, PATH_ENV)))
    return _load_cached(str(path))
