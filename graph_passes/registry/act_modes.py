"""Activation modes: what happens to the activations before the product with the dequantized weight.

``reference(x, group_size, asymmetric=False)`` takes activations ``[..., K]`` (values of the activation dtype) and
returns the float64 values the kernel multiplies: the identity for weight-only; for W8A8 the per-token quantized
activations read back (``s * a + o`` per row block, ``graph_passes.quantizers.activations``), whose product with the
dequantized weight is exactly the integer GEMM plus the offset correction of ``docs/op.md``. The op's ``act_mode``
attribute holds the entry's C enum value (enum ``trt_woq_act_mode``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from graph_passes.quantizers.activations import quantize_activations
from graph_passes.registry import Registry


@dataclass(frozen=True)
class ActMode:
    name: str                 # CLI / report name
    c_name: str               # enum trt_woq_act_mode in kernels.h
    c_enum: int
    reference: Callable       # (x [..., K], group_size, asymmetric=False) -> float64 [..., K]
    tests: tuple[str, ...]    # pytest ids
    summary: str = ""         # one line for --help
    weight_bits: tuple[int, ...] = ()  # weight formats (bits) it takes; () = any


def weight_only_reference(x: np.ndarray, group_size: int, asymmetric: bool = False) -> np.ndarray:
    """Weight-only: the activations enter the product as they are."""
    if asymmetric:
        raise ValueError("weight-only activations have no asymmetric quantization")
    return np.asarray(x, np.float64)


def w8a8_reference(x: np.ndarray, group_size: int, asymmetric: bool = False) -> np.ndarray:
    """W8A8: the activations quantized per row block to INT8 and read back in float64."""
    return quantize_activations(x, group_size, asymmetric).dequantize()


ACT_MODES: Registry[ActMode] = Registry("activation mode")
WEIGHT_ONLY = ACT_MODES.add(ActMode(
    name="weight_only", c_name="TRT_WOQ_ACT_MODE_WEIGHT_ONLY", c_enum=0, reference=weight_only_reference,
    tests=("tests/graph_passes/test_op.py::test_reference_evaluator_vs_float64",),
    summary="activations used as given (fp16 / bf16)"))
W8A8 = ACT_MODES.add(ActMode(
    name="w8a8", c_name="TRT_WOQ_ACT_MODE_W8A8_DYNAMIC", c_enum=1, reference=w8a8_reference,
    tests=("tests/graph_passes/test_w8a8.py::test_activation_quantizer_exact_steps",
           "tests/graph_passes/test_w8a8.py::test_evaluate_formula_matches_fake_quant",
           "tests/graph_passes/test_smoothing.py::test_smoothing_lowers_w8a8_error_on_outlier_channels"),
    summary="activations quantized to INT8 per token (per K group when grouped) on the fly; INT8 weights",
    weight_bits=(8,)))

__all__ = ["ACT_MODES", "W8A8", "WEIGHT_ONLY", "ActMode", "w8a8_reference", "weight_only_reference"]
