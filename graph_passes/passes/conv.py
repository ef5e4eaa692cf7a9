"""Rewrite passes for 2-D convolutions (matcher: ``graph_passes.passes.match_conv``).

``to_weight_only_conv`` (plugin format): each matched Conv (+ Add) becomes one ``trt_woq::WeightOnlyConv``
(``graph_passes.op_conv``) with the implicit-GEMM weight packed in the linear layout, explicit pads, the bias folded,
Casts around it in an FP32 graph and a following activation fused, exactly as the linear pass does.
``to_qdq_conv`` (Q/DQ format): the conv weight becomes ``DequantizeLinear`` of ``W^T [OC, K]`` (per channel on
axis 0, blocks along K on axis 1: the same groups, in the same K order, as the plugin format) + ``Reshape`` to
``[OC, IC, kh, kw]`` (K order (c, i, j)) or to ``[OC, kh, kw, IC]`` + ``Transpose`` (K order (i, j, c));
the Conv, its bias and any Add stay as they were.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from graph_passes.op_conv import ConvAttributes
from graph_passes.passes._common import PassRun, op_act_dtype
from graph_passes.passes.match_conv import find_conv_layers
from graph_passes.passes.to_plugin import rewrite_to_plugin
from graph_passes.passes.to_qdq import dequantize_node
from graph_passes.report import QuantReport


def conv_attributes(m, config, has_zeros: bool, has_bias: bool) -> ConvAttributes:
    return ConvAttributes(bits=config.weight_format.bits, group_size=config.group_size, in_features=m.k,
                          out_features=m.n, layout=config.layout, has_zeros=int(has_zeros), has_bias=int(has_bias),
                          in_channels=m.in_channels, kernel_shape=m.kernel_shape, strides=m.strides, pads=m.pads,
                          dilations=m.dilations, k_order=m.k_order)


def to_weight_only_conv(graph: gs.Graph, config, report: QuantReport | None = None) -> gs.Graph:
    """Replace every matched Conv / Conv+Add of ``graph`` by a WeightOnlyConv node; returns ``graph``."""
    return rewrite_to_plugin(graph, config, report, find_conv_layers, conv_attributes)


def to_qdq_conv(graph: gs.Graph, config, report: QuantReport | None = None) -> gs.Graph:
    """Replace every matched conv weight by a DequantizeLinear + Reshape of its quantized form; returns ``graph``."""
    run = PassRun(graph, config, report, find=find_conv_layers)
    report, names = run.report, run.names
    fmt = config.weight_format
    for m in run.matches:
        act, _ = op_act_dtype(m, config)

        def build(qw, m=m):
            w = dequantize_node(graph, names, fmt, qw, m.source_name, m.dtype, report, m.source, channels_first=True)
            view, perm = conv_attributes(m, config, False, False).onnx_view()
            shape = gs.Constant(names(f"{m.source_name}_shape"), np.array(view, np.int64))
            w4 = gs.Variable(names(f"{m.source_name}_dq4"), dtype=m.dtype, shape=list(view))
            graph.layer(op="Reshape", name=names(f"{m.source_name}_Reshape"), inputs=[w, shape], outputs=[w4])
            if perm is None:
                return w4
            wt = gs.Variable(names(f"{m.source_name}_dq4t"), dtype=m.dtype,
                             shape=[m.n, m.in_channels, *m.kernel_shape])
            graph.layer(op="Transpose", name=names(f"{m.source_name}_Transpose"), inputs=[w4], outputs=[wt],
                        attrs={"perm": list(perm)})
            return wt

        got = run.quantize(m, act, build)
        if got is None:
            continue
        w4, shared = got
        m.node.inputs[1] = w4
        run.rewritten(m, act, False, shared)
    return graph.cleanup().toposort()
