"""Ops: the ONNX patterns a graph pass replaces by one of our plugin ops, and everything the op needs.

Each entry names the matcher (``(gs.Graph, QuantConfig) -> (matches, skips)``), one rewriter per output format
(``(gs.Graph, QuantConfig, QuantReport) -> gs.Graph``: ``to_plugin`` writes the op, ``to_qdq`` standard
DequantizeLinear + the float op), the numpy reference of the op (float64 inside) and its ``onnx.reference`` class
builder. The passes run every op's rewriter in registration order (``graph_passes.passes.get_pass``).
C enum ``trt_woq_op``.
"""

from __future__ import annotations

from dataclasses import dataclass

from graph_passes.registry import Ref, Registry


@dataclass(frozen=True)
class OpKind:
    name: str                      # "linear"
    op_type: str                   # the plugin op's ONNX op_type (and TensorRT plugin name)
    domain: str                    # its ONNX domain
    source_ops: tuple[str, ...]    # the ONNX ops it replaces
    c_name: str                    # enum trt_woq_op in kernels.h
    c_enum: int
    match: Ref
    to_plugin: Ref
    to_qdq: Ref
    reference: Ref                 # (x, packed, scales, zeros, bias, attrs) -> y
    reference_op: Ref              # () -> onnx.reference OpRun class
    tests: tuple[str, ...]         # pytest ids
    weight_bits: tuple[int, ...] = ()  # weight formats (bits) its kernels serve; () = any

    def rewriter(self, output_format: str) -> Ref:
        """The rewrite pass producing ``output_format`` ("plugin" or "qdq") for this op."""
        return {"plugin": self.to_plugin, "qdq": self.to_qdq}[output_format]


OPS: Registry[OpKind] = Registry("op")
LINEAR = OPS.add(OpKind(
    name="linear", op_type="WeightOnlyLinear", domain="trt_woq", source_ops=("MatMul", "Gemm"),
    c_name="TRT_WOQ_OP_LINEAR", c_enum=0, match=Ref("graph_passes.passes.match:find_linear_layers"),
    to_plugin=Ref("graph_passes.passes.to_plugin:to_weight_only_linear"),
    to_qdq=Ref("graph_passes.passes.to_qdq:to_qdq"),
    reference=Ref("graph_passes.op:evaluate"), reference_op=Ref("graph_passes.op:reference_op"),
    tests=("tests/graph_passes/test_op.py::test_reference_evaluator_vs_float64",
           "tests/graph_passes/passes/test_match.py::test_matmul_and_matmul_add_rank3_dynamic",
           "tests/graph_passes/passes/test_to_plugin.py::test_fp32_graph_gets_casts_and_runs",
           "tests/graph_passes/passes/test_to_qdq.py::test_single_layer_twins_agree_to_fp32_rounding")))

CONV2D = OPS.add(OpKind(
    name="conv2d", op_type="WeightOnlyConv", domain="trt_woq", source_ops=("Conv",),
    c_name="TRT_WOQ_OP_CONV2D", c_enum=1, match=Ref("graph_passes.passes.match_conv:find_conv_layers"),
    to_plugin=Ref("graph_passes.passes.conv:to_weight_only_conv"), to_qdq=Ref("graph_passes.passes.conv:to_qdq_conv"),
    reference=Ref("graph_passes.op_conv:evaluate"), reference_op=Ref("graph_passes.op_conv:reference_op"),
    tests=("tests/graph_passes/test_op_conv.py::test_conv_reference_vs_direct_float64",
           "tests/graph_passes/passes/test_conv.py::test_policy_and_geometry",
           "tests/graph_passes/passes/test_conv.py::test_plugin_and_qdq_twins_agree",
           "tests/graph_passes/passes/test_conv.py::test_fp6_convs_stay_float"),
    weight_bits=(8, 4)))

__all__ = ["CONV2D", "LINEAR", "OPS", "OpKind"]
