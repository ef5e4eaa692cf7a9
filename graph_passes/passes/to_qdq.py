"""Rewrite pass: linear layers -> ``DequantizeLinear`` (opset 21) feeding ``MatMul`` (the Q/DQ format).

The DQ node reads the same quantized values and the same scales as the plugin format, so both formats represent
identical weights: symmetric -> INT8 / INT4 data ``q = U - 2**(bits-1)`` with no zero point; asymmetric -> UINT8 /
UINT4 data ``U`` with zero point ``Z``. Per channel: ``axis=1`` and scales [N]; groups: ``axis=0``, ``block_size=G``
and scales [K/G, N]. Gemm -> MatMul (+ Add of beta * C); MatMul + Add keeps its Add. The DQ output has the graph's
dtype: in an FP32 graph the scales are float32 holding values rounded to config.act_dtype.
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.ir.tensor import LazyValues

from graph_passes.passes._common import PassRun, bias_storage, op_act_dtype
from graph_passes.passes.match import constant_nbytes
from graph_passes.report import QuantReport

QDQ_OPSET = 21


def _int_constant(fmt, name: str, values: np.ndarray, signed: bool) -> gs.Constant:
    """The format's Q/DQ integer type (INT8/UINT8, INT4/UINT4 packed two a byte) as a constant."""
    return gs.Constant(name, LazyValues(fmt.qdq_tensor(name, values, signed)))


def dequantize_node(graph, names, fmt, qw, base: str, graph_dtype, report, source, channels_first: bool = False):
    """A DequantizeLinear of ``qw`` into a new tensor of ``graph_dtype``: ``W[K, N]``, or ``W^T [N, K]`` with
    ``channels_first`` (the conv pass reshapes that to the ONNX conv weight). Counts the bytes in ``report``."""
    bits, half = qw.bits, 1 << (qw.bits - 1)
    per_channel = qw.group_size == -1
    u, scales, zeros = qw.u, qw.scales, qw.zeros
    if channels_first:
        u, scales, zeros = u.T, scales.T, None if zeros is None else zeros.T
    if zeros is None:
        data = _int_constant(fmt, names(f"{base}_q{bits}"), u.astype(np.int16) - half, signed=True)
    else:
        data = _int_constant(fmt, names(f"{base}_q{bits}"), u, signed=False)
    s = scales.reshape(-1) if per_channel else scales
    scale = gs.Constant(names(f"{base}_q{bits}_scale"), s.astype(graph_dtype))
    inputs = [data, scale]
    if zeros is not None:
        z = zeros.reshape(-1) if per_channel else zeros
        inputs.append(_int_constant(fmt, names(f"{base}_q{bits}_zero_point"), z.astype(np.uint8), signed=False))
    channel_axis, k_axis = (0, 1) if channels_first else (1, 0)
    attrs = {"axis": channel_axis} if per_channel else {"axis": k_axis, "block_size": qw.group_size}
    w = gs.Variable(names(f"{base}_dq"), dtype=graph_dtype, shape=list(u.shape))
    # In the main graph: every subgraph that shares the weight sees its output (outer scope).
    graph.layer(op="DequantizeLinear", name=names(f"{base}_DequantizeLinear"), inputs=inputs, outputs=[w],
                attrs=attrs)
    report.weight_bytes_before += constant_nbytes(source)
    report.weight_bytes_after += (qw.k * qw.n * bits // 8 + s.size * np.dtype(graph_dtype).itemsize
                                  + (0 if zeros is None else -(-s.size * bits // 8)))
    return w


def to_qdq(graph: gs.Graph, config, report: QuantReport | None = None) -> gs.Graph:
    """Replace every matched weight by a DequantizeLinear of its quantized form; returns ``graph``.

    The caller makes sure the model's default opset is >= 21 (see graph_passes.pipeline).
    """
    run = PassRun(graph, config, report)
    report, names = run.report, run.names
    fmt = config.weight_format
    for m in run.matches:
        act, casts = op_act_dtype(m, config)
        graph_dtype = m.dtype
        base = m.source_name + ("_T" if m.transpose else "")

        def build(qw, base=base, graph_dtype=graph_dtype, m=m):
            return dequantize_node(graph, names, fmt, qw, base, graph_dtype, report, m.source)

        got = run.quantize(m, act, build)
        if got is None:
            continue
        w, shared = got
        if m.node.op == "MatMul":
            m.node.inputs[1] = w
        else:  # Gemm -> MatMul (+ Add)
            out = m.output
            m.node.outputs.clear()
            name = names.replacing(m.node, m.node.op)
            if m.bias is None:
                m.graph.layer(op="MatMul", name=names(f"{name}_MatMul"), inputs=[m.x, w], outputs=[out])
            else:
                mm = gs.Variable(names(f"{name}_matmul_out"), dtype=graph_dtype)
                m.graph.layer(op="MatMul", name=names(f"{name}_MatMul"), inputs=[m.x, w], outputs=[mm])
                b = gs.Constant(names(f"{name}_bias"), bias_storage(m.bias, graph_dtype))
                m.graph.layer(op="Add", name=names(f"{name}_Add"), inputs=[mm, b], outputs=[out])
        run.rewritten(m, act, False, shared)
    return graph.cleanup().toposort()
