"""Weight formats: how a weight is quantized, packed, read back in float64 and written as standard ONNX Q/DQ.

Adding a format (``docs/architecture.md``, "How to add a weight format"): a quantizer in ``graph_passes/quantizers/``,
a layout module in ``graph_passes/layouts/`` (spec in ``docs/layouts.md``), one :class:`WeightFormat` entry below,
the converter and kernel instantiations on the C side (enum ``trt_woq_weight_format``), and tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.layouts import fp6_split_v1, interleaved_v1
from graph_passes.quantizers import DEFAULT_CLIP_RATIOS, quantize_fp6, quantize_rtn
from graph_passes.registry import Registry

# onnx.TensorProto data types (numbers, so that choosing a format does not import onnx)
ONNX_UINT8, ONNX_INT8, ONNX_UINT4, ONNX_INT4 = 2, 3, 21, 22


@dataclass(frozen=True)
class QdqTwin:
    """How a format's codes are written as ONNX ``DequantizeLinear`` data: ``signed`` holds ``U - 2**(bits-1)``
    (symmetric, no zero point), ``unsigned`` holds ``U`` and the zero points (asymmetric)."""

    signed: int
    unsigned: int


@dataclass(frozen=True)
class WeightFormat:
    """One weight format. ``quantizer(w, bits, group_size, asymmetric, act_dtype, clip_ratios, name)`` returns codes
    ``u`` uint8 [K, N] + scales (+ zeros) with a float64 ``dequantize()`` (``graph_passes.quantizers``); ``layout``
    is the packer module (``pack``, ``unpack``, ``dequantize_reference``, ``check_shape``, ``VERSION``);
    ``qdq`` is None when ONNX has no type for the codes (then ``compare`` / ``twin`` use a float twin:
    dequantized constant weights + MatMul). ``converter_test`` is the pytest id of the device test of the
    code -> FP16/BF16 conversion; ``tests`` those of the quantizer and the layout."""

    name: str                       # "int4": report / CLI name; the numpy API's algo is "weight_only_<name>"
    label: str                      # "INT4", in messages
    bits: int                       # width of one code; the CLI's --bits value
    c_name: str                     # enum trt_woq_weight_format in kernels.h
    c_enum: int
    quantizer: Callable
    layout: ModuleType
    group_sizes: tuple[int, ...]    # -1 = one group over K (per output channel)
    asymmetric: bool                # zero points supported
    qdq: QdqTwin | None
    converter_test: str
    tests: tuple[str, ...]

    @property
    def algo(self) -> str:
        return f"weight_only_{self.name}"

    def check_group_size(self, group_size: int, where: str = "") -> None:
        if group_size not in self.group_sizes:
            raise QuantizationError(f"{where or self.label}: group_size {group_size} is not one of "
                                    f"{self.group_sizes} ({self.label})")

    def quantize(self, w: np.ndarray, group_size: int, asymmetric: bool = False, act_dtype: str = "fp16",
                 clip_ratios=DEFAULT_CLIP_RATIOS, name: str = "weight"):
        """Round-to-nearest quantization with the format's scale search (the ``rtn`` method)."""
        self.check_group_size(group_size, name)
        if asymmetric and not self.asymmetric:
            raise QuantizationError(f"{name}: {self.label} has no zero points; quantize it symmetric")
        return self.quantizer(w, self.bits, group_size, asymmetric, act_dtype, clip_ratios, name)

    def check_shape(self, k: int, n: int) -> None:
        """LayoutError naming the constraint when a [K, N] weight cannot be packed."""
        self.layout.check_shape(k, n, self.bits)

    def pack(self, u: np.ndarray) -> np.ndarray:
        return self.layout.pack(u, self.bits)

    def unpack(self, packed: np.ndarray, k: int, n: int) -> np.ndarray:
        return self.layout.unpack(packed, k, n, self.bits)

    def dequantize(self, packed, scales, zeros, k: int, n: int, group_size: int) -> np.ndarray:
        """The float64 reference: ``W[K, N]`` from the packed tensors, exactly what the kernels must compute."""
        return self.layout.dequantize_reference(packed, scales, zeros, k, n, self.bits, group_size)

    def qdq_tensor(self, name: str, values: np.ndarray, signed: bool):
        """An ``onnx.TensorProto`` of the Q/DQ type holding integer ``values`` (sub-byte types packed low first)."""
        if self.qdq is None:
            raise QuantizationError(f"{self.label} has no ONNX data type: --format qdq cannot hold it; use --format "
                                    f"plugin (compare measures it through a float twin)")
        import onnx

        per_byte = 8 // self.bits
        flat = (np.asarray(values).astype(np.int16).reshape(-1) & ((1 << self.bits) - 1)).astype(np.uint8)
        flat = np.concatenate([flat, np.zeros(-flat.size % per_byte, np.uint8)]).reshape(-1, per_byte)
        raw = np.bitwise_or.reduce(flat << (self.bits * np.arange(per_byte, dtype=np.uint8)), axis=1).astype(np.uint8)
        return onnx.helper.make_tensor(name, self.qdq.signed if signed else self.qdq.unsigned, list(np.shape(values)),
                                       raw.tobytes(), raw=True)


_INTEGER_TESTS = ("tests/graph_passes/test_quantize.py::test_error_bound_and_search_beats_maxabs",
                  "tests/graph_passes/layouts/test_interleaved_v1.py::test_round_trip_seeded_sweep")
_INTEGER_CONVERTER_TEST = "tests/plugins/kernels/test_kernels_gpu.py::test_converters_exhaustive"

WEIGHT_FORMATS: Registry[WeightFormat] = Registry("weight format")
INT8 = WEIGHT_FORMATS.add(WeightFormat(
    name="int8", label="INT8", bits=8, c_name="TRT_WOQ_WEIGHT_INT8", c_enum=0, quantizer=quantize_rtn,
    layout=interleaved_v1, group_sizes=(-1, 32, 64, 128, 256), asymmetric=True,
    qdq=QdqTwin(signed=ONNX_INT8, unsigned=ONNX_UINT8), converter_test=_INTEGER_CONVERTER_TEST,
    tests=_INTEGER_TESTS))
INT4 = WEIGHT_FORMATS.add(WeightFormat(
    name="int4", label="INT4", bits=4, c_name="TRT_WOQ_WEIGHT_INT4", c_enum=1, quantizer=quantize_rtn,
    layout=interleaved_v1, group_sizes=(-1, 32, 64, 128, 256), asymmetric=True,
    qdq=QdqTwin(signed=ONNX_INT4, unsigned=ONNX_UINT4), converter_test=_INTEGER_CONVERTER_TEST,
    tests=_INTEGER_TESTS))

FP6 = WEIGHT_FORMATS.add(WeightFormat(
    name="fp6", label="FP6 E3M2", bits=6, c_name="TRT_WOQ_WEIGHT_FP6_E3M2", c_enum=2, quantizer=quantize_fp6,
    layout=fp6_split_v1, group_sizes=(-1, 32, 64, 128, 256), asymmetric=False, qdq=None,
    converter_test="tests/plugins/kernels/test_fp6_gpu.py::test_fp6_converters_exhaustive",
    tests=("tests/graph_passes/test_fp6_e3m2.py::test_all_64_codes_decode_by_definition",
           "tests/graph_passes/test_quantize_fp6.py::test_search_never_worse_than_max_abs",
           "tests/graph_passes/layouts/test_fp6_split_v1.py::test_round_trip_odd_shapes",
           "tests/graph_passes/layouts/test_fp6_split_v1.py::"
           "test_device_converter_model_on_every_code_in_every_position")))


def format_by_bits(bits: int, where: str = "") -> WeightFormat:
    """The format the CLI's ``--bits`` / the op's ``bits`` attribute names; QuantizationError otherwise."""
    for f in WEIGHT_FORMATS:
        if f.bits == bits:
            return f
    raise QuantizationError(f"{where + ': ' if where else ''}bits {bits} is not one of {all_bits()}")


def format_by_algo(algo: str) -> WeightFormat:
    """The format of a numpy-API ``algo`` name (``weight_only_int4``, ...)."""
    for f in WEIGHT_FORMATS:
        if f.algo == algo:
            return f
    raise QuantizationError(f"algo must be one of {', '.join(f.algo for f in WEIGHT_FORMATS)}, got {algo!r}")


def all_bits() -> tuple[int, ...]:
    return tuple(f.bits for f in WEIGHT_FORMATS)


def all_group_sizes() -> tuple[int, ...]:
    """Every group size some format offers, in increasing order with -1 first."""
    sizes = {g for f in WEIGHT_FORMATS for g in f.group_sizes}
    return tuple(sorted(sizes, key=lambda g: (g != -1, g)))


__all__ = ["FP6", "INT4", "INT8", "WEIGHT_FORMATS", "QdqTwin", "WeightFormat", "all_bits", "all_group_sizes",
           "format_by_algo", "format_by_bits"]
