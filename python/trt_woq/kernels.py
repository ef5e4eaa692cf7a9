"""Thin ctypes wrapper over the kernels' C ABI (``plugins/kernels/include/trt_woq/kernels.h``).

Operands are device pointers (plain ints, or anything ``int()`` accepts, such as cuda-python handles); the stream is a
``cudaStream_t`` from ``cuda.bindings.runtime`` (or its int value, 0 = legacy default stream). Nothing here allocates
or copies: tests and the benchmark bring their own buffers (torch there; this module never imports torch).

    from trt_woq import kernels
    lib = kernels.load()                        # finds libtrt_woq_kernels.so (TRT_WOQ_KERNELS_PATH overrides)
    lib.linear(x=..., packed_weight=..., scales=..., output=..., m=1, n=4096, k=4096, weight_format="int4",
               group_size=128, act="fp16", stream=stream)
    lib.candidate_info(0)                       # name and the formats / act modes / ops / epilogues it serves

A status other than OK raises :class:`KernelError`, whose message names the call, m, n, k and the options.
``cuda.bindings`` is imported only where the device's compute capability is needed (``supports``/``dispatch``
without an explicit ``sm``).
"""

from __future__ import annotations

import ctypes
import enum
import functools
from dataclasses import dataclass
from pathlib import Path

from trt_woq._libs import find_library

LIBRARY_NAME = "libtrt_woq_kernels.so"
PATH_ENV = "TRT_WOQ_KERNELS_PATH"
ABI_VERSION = 5
CANDIDATE_AUTO = -1


def _c_enum(name: str, members: str) -> type[enum.IntEnum]:
    """One enum of kernels.h, whose values are 0, 1, ... in order (tests/plugins/kernels checks them)."""
    return enum.IntEnum(name, members.split(), start=0, module=__name__)


Status = _c_enum("Status", "OK INVALID_ARGUMENT UNSUPPORTED_SHAPE UNSUPPORTED_ARCH WORKSPACE CUDA UNSUPPORTED_OPTION")
Act = _c_enum("Act", "FP16 BF16")
WeightFormat = _c_enum("WeightFormat", "INT8 INT4 FP6_E3M2")
ActMode = _c_enum("ActMode", "WEIGHT_ONLY W8A8_DYNAMIC")
Op = _c_enum("Op", "LINEAR CONV2D")
ConvKOrder = _c_enum("ConvKOrder", "CIJ IJC")
Epilogue = _c_enum("Epilogue", "NONE RELU CLIP SILU GELU_ERF GELU_TANH")


def weight_format_from_bits(bits: int):
    """The WeightFormat the ONNX op's ``bits`` attribute names (8, 4, or 6 = FP6 E3M2)."""
    try:
        return {8: WeightFormat.INT8, 4: WeightFormat.INT4, 6: WeightFormat.FP6_E3M2}[bits]
    except KeyError:
        raise ValueError(f"bits must be 8, 4 or 6, got {bits!r}") from None


class KernelError(RuntimeError):
    """A kernel entry point returned a failure status (``.status``)."""

    def __init__(self, message: str, status: Status):
        super().__init__(message)
        self.status = status


class KernelLibraryError(RuntimeError):
    """The kernels library or cuda-python could not be loaded; the message says how to provide it."""


class ConvGeometry(ctypes.Structure):
    """Mirror of ``trt_woq_conv_geometry``."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "batch", "in_channels", "in_h", "in_w", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_top", "pad_left",
        "pad_bottom", "pad_right", "dilation_h", "dilation_w", "out_h", "out_w", "k_order", "activation_nhwc")]


class LinearParams(ctypes.Structure):
    """Mirror of ``trt_woq_linear_params`` (field order and types must match kernels.h; C enums are int-sized)."""

    _fields_ = [
        ("activation", ctypes.c_void_p),
        ("packed_weight", ctypes.c_void_p),
        ("scales", ctypes.c_void_p),
        ("zeros", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("weight_sums", ctypes.c_void_p),
        ("output", ctypes.c_void_p),
        ("m", ctypes.c_int64),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
        ("weight_format", ctypes.c_int),
        ("group_size", ctypes.c_int32),
        ("layout_version", ctypes.c_int32),
        ("act_type", ctypes.c_int),
        ("act_mode", ctypes.c_int),
        ("act_asymmetric", ctypes.c_int32),
        ("op", ctypes.c_int),
        ("epilogue", ctypes.c_int),
        ("clip_min", ctypes.c_float),
        ("clip_max", ctypes.c_float),
        ("conv", ConvGeometry),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
    ]

    def describe(self) -> str:
        group = "per-channel" if self.group_size == -1 else f"g{self.group_size}"
        parts = [f"m={self.m}, n={self.n}, k={self.k}", f"{_name(WeightFormat, self.weight_format)} {group}",
                 _name(Act, self.act_type)]
        if self.act_mode != ActMode.WEIGHT_ONLY:
            parts.append(_name(ActMode, self.act_mode) + (" asymmetric" if self.act_asymmetric else ""))
        if self.op != Op.LINEAR:
            parts.append(_name(Op, self.op))
        if self.epilogue != Epilogue.NONE:
            parts.append(f"epilogue {_name(Epilogue, self.epilogue)}")
        parts += [name for name, ptr in (("zeros", self.zeros), ("bias", self.bias)) if ptr]
        parts.append(f"layout v{self.layout_version}")
        return ", ".join(parts)


def _name(enum_type, value: int) -> str:
    try:
        return enum_type(value).name.lower()
    except ValueError:
        return f"{enum_type.__name__}({value})"


class CandidateInfo(ctypes.Structure):
    """Mirror of ``trt_woq_candidate_info``: a candidate's name and what it serves (bit masks of enum values)."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("weight_formats", ctypes.c_uint32),
        ("act_modes", ctypes.c_uint32),
        ("ops", ctypes.c_uint32),
        ("epilogues", ctypes.c_uint32),
    ]


@dataclass(frozen=True)
class Serves:
    """What one candidate serves, decoded from :class:`CandidateInfo`'s masks (bits of unknown values are kept in
    ``unknown``, e.g. from a newer library)."""

    name: str
    weight_formats: frozenset
    act_modes: frozenset
    ops: frozenset
    epilogues: frozenset
    unknown: tuple = ()

    @classmethod
    def from_info(cls, info: CandidateInfo) -> "Serves":
        axes, unknown = {}, []
        for field, enum_type in (("weight_formats", WeightFormat), ("act_modes", ActMode), ("ops", Op),
                                 ("epilogues", Epilogue)):
            mask = getattr(info, field)
            axes[field] = frozenset(v for v in enum_type if mask >> int(v) & 1)
            rest = mask & ~sum(1 << int(v) for v in enum_type)
            if rest:
                unknown.append((field, rest))
        return cls(info.name.decode(), unknown=tuple(unknown), **axes)


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


def _weight_format(weight_format, bits):
    if (weight_format is None) == (bits is None):
        raise ValueError("give one of weight_format ('int8', 'int4', 'fp6_e3m2') and bits (8, 4, 6)")
    if bits is not None:
        return weight_format_from_bits(bits)
    if isinstance(weight_format, str):
        try:
            return WeightFormat[weight_format.upper()]
        except KeyError:
            raise ValueError(f"weight_format must be one of {[f.name.lower() for f in WeightFormat]}, "
                             f"got {weight_format!r}") from None
    return WeightFormat(weight_format)


def make_params(*, m: int, n: int, k: int, group_size: int, weight_format=None, bits: int | None = None, act="fp16",
                x=None, packed_weight=None, scales=None, zeros=None, bias=None, output=None, workspace=None,
                workspace_size: int = 0, layout_version: int | None = None, act_mode=ActMode.WEIGHT_ONLY,
                act_asymmetric: bool = False, weight_sums=None, epilogue=Epilogue.NONE, clip_min: float = 0.0,
                clip_max: float = 0.0, op=Op.LINEAR, conv: ConvGeometry | None = None) -> LinearParams:
    """Build a params struct; pointers may be omitted for the size-only queries (supports, dispatch, workspace).

    The format is ``weight_format`` (a :class:`WeightFormat` or its name) or ``bits`` as the ONNX op names it; the
    layout defaults to the format's (1 for INT8/INT4, 2 for FP6)."""
    fmt = _weight_format(weight_format, bits)
    if layout_version is None:
        layout_version = 2 if fmt == WeightFormat.FP6_E3M2 else 1
    return LinearParams(
        activation=_pointer(x), packed_weight=_pointer(packed_weight), scales=_pointer(scales), zeros=_pointer(zeros),
        bias=_pointer(bias), weight_sums=_pointer(weight_sums), output=_pointer(output), m=m, n=n, k=k,
        weight_format=int(fmt), group_size=group_size, layout_version=layout_version, act_type=int(_act(act)),
        act_mode=int(act_mode), act_asymmetric=int(bool(act_asymmetric)), op=int(op), epilogue=int(epilogue),
        clip_min=clip_min, clip_max=clip_max, conv=conv if conv is not None else ConvGeometry(),
        workspace=_pointer(workspace), workspace_size=workspace_size)


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
        try:
            lib.trt_woq_abi_version.restype = ctypes.c_int32
            abi = int(lib.trt_woq_abi_version())
        except AttributeError:
            abi = 1  # the entry exists from ABI 2 on
        if abi != ABI_VERSION:
            raise KernelLibraryError(f"{self.path} implements C ABI version {abi}; this package needs version "
                                     f"{ABI_VERSION} (rebuild the kernels from this checkout, or set {PATH_ENV})")
        pp = ctypes.POINTER(LinearParams)
        lib.trt_woq_linear_candidate_count.argtypes = []
        lib.trt_woq_linear_candidate_count.restype = ctypes.c_int32
        lib.trt_woq_linear_candidate_describe.argtypes = [ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]
        lib.trt_woq_linear_candidate_describe.restype = ctypes.c_int
        for lookup, arg in (("tactic", ctypes.c_int32), ("by_tactic", ctypes.c_int32), ("by_name", ctypes.c_char_p)):
            getattr(lib, f"trt_woq_linear_candidate_{lookup}").argtypes = [arg]
            getattr(lib, f"trt_woq_linear_candidate_{lookup}").restype = ctypes.c_int32
        lib.trt_woq_linear_candidate_info.argtypes = [ctypes.c_int32, ctypes.POINTER(CandidateInfo)]
        lib.trt_woq_linear_candidate_info.restype = ctypes.c_int
        lib.trt_woq_linear_candidate_serves.argtypes = [ctypes.c_int32, pp]
        lib.trt_woq_linear_candidate_serves.restype = ctypes.c_int
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

    def candidate_tactic(self, candidate: int) -> int:
        """The candidate's TensorRT tactic, a hash of its name (kernels.h); what to persist instead of the id."""
        tactic = int(self._lib.trt_woq_linear_candidate_tactic(candidate))
        if tactic == 0:
            raise KernelError(f"candidate_tactic({candidate}): no such candidate, or two candidates' tactics collide "
                              "(the library wrote which to stderr)", Status.INVALID_ARGUMENT)
        return tactic

    def candidate_by_tactic(self, tactic: int) -> int:
        """The id of the candidate with this tactic, or -1 when this build has none."""
        return int(self._lib.trt_woq_linear_candidate_by_tactic(tactic))

    def candidate_by_name(self, name: str) -> int:
        """The id of the candidate with this name, or -1 when this build has none."""
        return int(self._lib.trt_woq_linear_candidate_by_name(name.encode()))

    def candidate_info(self, candidate: int) -> Serves:
        """The candidate's name and the weight formats, activation modes, ops and epilogues it serves."""
        info = CandidateInfo()
        self._check(self._lib.trt_woq_linear_candidate_info(candidate, ctypes.byref(info)),
                    f"candidate_info({candidate})")
        return Serves.from_info(info)

    def serves(self, candidate: int, params: LinearParams) -> Status:
        """OK when the candidate serves the format, activation mode, op and epilogue of ``params`` (sizes unread),
        else UNSUPPORTED_OPTION."""
        return Status(self._lib.trt_woq_linear_candidate_serves(candidate, ctypes.byref(params)))

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

    def linear(self, *, x, packed_weight, scales, output, stream=None, candidate: int = CANDIDATE_AUTO,
               **options) -> None:
        """Y[m, n] = X[m, k] @ dequant(W) (+ bias) on device pointers; ``options`` are :func:`make_params`'s
        (m, n, k, group_size, weight_format or bits, ...); see kernels.h for shapes."""
        params = make_params(x=x, packed_weight=packed_weight, scales=scales, output=output, **options)
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
