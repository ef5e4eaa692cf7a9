"""Quantization methods: how the codes and scales of a weight are chosen, for any weight format.

``quantize(w, fmt, group_size, asymmetric, act_dtype, clip_ratios, name, stats=None)`` returns the format's quantized
result (codes ``u``, scales, zeros, float64 ``dequantize()``). A method with ``needs_calibration`` gets ``stats``,
the statistics of the node's input activations gathered from calibration data; ``rtn`` needs none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from graph_passes.registry import Ref, Registry


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

def _calibrated(name: str, summary: str, algorithm_test: str) -> QuantMethod:
    """A method of ``graph_passes.calibration.methods`` (imported when first used); it needs calibration data."""
    tests = "tests/graph_passes/calibration/"
    return METHODS.add(QuantMethod(name=name, summary=f"{summary} (needs calibration data)",
                                   quantize=Ref(f"graph_passes.calibration.methods:{name}"), needs_calibration=True,
                                   tests=(tests + algorithm_test, tests + "test_cli.py::test_plugin_equals_qdq")))


AWQ = _calibrated("awq", "activation-aware scaling of input channels, then an output-error clip search",
                  "test_algorithms.py::test_awq_beats_rtn_on_outlier_channels")
GPTQ = _calibrated("gptq", "rounding error spread over the not yet quantized inputs through the inverse Hessian",
                   "test_algorithms.py::test_gptq_lowers_output_error_on_correlated_inputs")

__all__ = ["AWQ", "GPTQ", "METHODS", "RTN", "QuantMethod", "rtn"]
