"""Quantization methods: how the codes and scales of a weight are chosen, for any weight format.

``quantize(w, fmt, group_size, asymmetric, act_dtype, clip_ratios, name, stats=None)`` returns the format's quantized
result (codes ``u``, scales, zeros, float64 ``dequantize()``). A method with ``needs_calibration`` gets ``stats``,
the statistics of the node's input activations gathered from calibration data; ``rtn`` needs none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from graph_passes.registry import Registry


@dataclass(frozen=True)
class QuantMethod:
    name: str                 # the CLI's --method value
    summary: str              # one line for --help
    quantize: Callable
    needs_calibration: bool
    tests: tuple[str, ...]    # pytest ids


def rtn(w, fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str = "weight", stats=None):
    """Round to nearest with the format's per-group scale search; ``stats`` are not used."""
    return fmt.quantize(w, group_size, asymmetric, act_dtype, clip_ratios, name)


METHODS: Registry[QuantMethod] = Registry("quantization method", "--method")
RTN = METHODS.add(QuantMethod(name="rtn", summary="round to nearest with a per-group scale search", quantize=rtn,
                              needs_calibration=False,
                              tests=("tests/graph_passes/test_quantize.py::test_search_improves_int4_on_outliers",)))

__all__ = ["METHODS", "RTN", "QuantMethod", "rtn"]
