"""graph_passes: ONNX -> low-bit weight quantization passes for TensorRT (CPU only, numpy + onnx).

Public API:
  * numpy: :func:`weight_quantize`, :func:`weight_dequantize`, :func:`weight_only_linear` (Paddle-like names).
  * models: :func:`quantize_model`, :func:`inspect_model` with a :class:`QuantConfig`; returns a :class:`QuantReport`.
  * the op: :mod:`graph_passes.op` (contract, node builder, reference evaluator).
  * the passes: :mod:`graph_passes.passes` (``(gs.Graph, QuantConfig) -> gs.Graph``).
  * the registries of weight formats, ops, activation modes, epilogues and methods: :mod:`graph_passes.registry`
    (``docs/architecture.md``).
TensorRT, polygraphy and cuda are never imported here.
"""

from graph_passes.config import QuantConfig
from graph_passes.errors import LayoutError, QuantizationError, UserError
from graph_passes.pipeline import inspect_model, quantize_model
from graph_passes.quantize import quantize_rtn, weight_dequantize, weight_only_linear, weight_quantize
from graph_passes.report import QuantReport

__all__ = ["LayoutError", "QuantConfig", "QuantReport", "QuantizationError", "UserError", "inspect_model",
           "quantize_model", "quantize_rtn", "weight_dequantize", "weight_only_linear", "weight_quantize"]
