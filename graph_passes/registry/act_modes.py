"""Activation modes: what happens to the activations before the product with the dequantized weight.

``reference(x, group_size)`` takes float64 activations ``[..., K]`` and returns the float64 values the kernel
multiplies: the identity for weight-only; a fake-quantized copy (quantize per token, dequantize) for a mode that
quantizes activations. C enum ``trt_woq_act_mode``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from graph_passes.registry import Registry


@dataclass(frozen=True)
class ActMode:
    name: str                 # CLI / report name
    c_name: str               # enum trt_woq_act_mode in kernels.h
    c_enum: int
    reference: Callable       # (x float64 [..., K], group_size) -> float64 [..., K]
    tests: tuple[str, ...]    # pytest ids


def weight_only_reference(x: np.ndarray, group_size: int) -> np.ndarray:
    """Weight-only: the activations enter the product as they are."""
    return np.asarray(x, np.float64)


ACT_MODES: Registry[ActMode] = Registry("activation mode")
WEIGHT_ONLY = ACT_MODES.add(ActMode(
    name="weight_only", c_name="TRT_WOQ_ACT_MODE_WEIGHT_ONLY", c_enum=0, reference=weight_only_reference,
    tests=("tests/graph_passes/test_op.py::test_reference_evaluator_vs_float64",)))

__all__ = ["ACT_MODES", "WEIGHT_ONLY", "ActMode", "weight_only_reference"]
