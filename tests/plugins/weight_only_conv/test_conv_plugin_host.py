"""WeightOnlyConv's host code on the CPU, against every TensorRT header set found (tests/plugins/cxx_build.py):
conv_plugin_host_checks.cpp, linked with the plugin library's sources and tests/plugins/host_harness.h's stand-ins
(no GPU, no TensorRT library), drives the creator with the nodes that graph_passes writes (fields built as TensorRT's
ONNX parser builds them), the serialization round trip, output shapes against the op's formula, formats, workspace,
enqueue's operands and geometry, invalid fields and operand shapes. Skipped, with the reason, where no headers, no
CUDA runtime header or no C++ compiler are found (CI has no TensorRT headers)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cxx_build import each_header_set, run_host_checks, woq_node  # noqa: E402


def conv_nodes():
    """WeightOnlyConv nodes over the geometry and options graph_passes writes: 1x1, 3x3 with padding, stride 2 with
    asymmetric padding, dilation 2, 7x7 stride 2, both K orders, INT8 / INT4, zeros, bias, every epilogue."""
    from graph_passes.op_conv import K_ORDER_CIJ, K_ORDER_IJC, ConvAttributes
    from graph_passes.registry.epilogues import CLIP, EPILOGUES

    def conv(c, kh, kw, bits=4, group_size=64, **kw_):
        return ConvAttributes(bits=bits, group_size=group_size, in_features=c * kh * kw, out_features=32,
                              in_channels=c, kernel_shape=(kh, kw), **kw_)

    yield woq_node("c1x1", conv(64, 1, 1))
    yield woq_node("c3x3_pad1_ijc", conv(64, 3, 3, pads=(1, 1, 1, 1), k_order=K_ORDER_IJC))
    yield woq_node("c3x3_s2_asym_pads", conv(64, 3, 3, bits=8, group_size=-1, strides=(2, 2), pads=(0, 0, 1, 1)))
    yield woq_node("c3x3_dil2", conv(64, 3, 3, strides=(1, 2), pads=(2, 1, 2, 0), dilations=(2, 2), has_bias=1))
    yield woq_node("c7x7_s2", conv(64, 7, 7, bits=8, group_size=64, strides=(2, 2), pads=(3, 3, 3, 3), has_zeros=1,
                                    has_bias=1, k_order=K_ORDER_CIJ))
    yield woq_node("c1x3_zeros", conv(128, 1, 3, has_zeros=1, pads=(0, 1, 0, 1), k_order=K_ORDER_IJC))
    for e in EPILOGUES:
        params = {"clip_min": -1.0, "clip_max": 6.0} if e is CLIP else {}
        yield woq_node(f"c3x3_{e.name}", conv(64, 3, 3, pads=(1, 1, 1, 1)).with_epilogue(e, **params))
    yield woq_node("c3x3_relu6_max_only", conv(64, 3, 3).with_epilogue(CLIP, clip_max=6.0))


@each_header_set
def test_host_checks(trt_include, tmp_path):
    run_host_checks(HERE / "conv_plugin_host_checks.cpp", conv_nodes, trt_include, tmp_path)
