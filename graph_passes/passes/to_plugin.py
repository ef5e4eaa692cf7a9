"""Rewrite pass: linear layers -> ``trt_woq::WeightOnlyLinear`` nodes with packed weights (the plugin format).

:func:`rewrite_to_plugin` is the loop every op's plugin pass runs (``graph_passes.passes.conv`` for WeightOnlyConv):
match, quantize once, pack, replace, then fuse a following activation into the op (``passes.epilogue``).
FP16 / BF16 graphs: the op replaces the node(s) directly. FP32 graphs: ``Cast(X -> act) -> WeightOnlyLinear ->
Cast(-> float32)``, scales / zeros / bias in the activation dtype (config.act_dtype). ``act_dtype="fp32"`` leaves the
op in float32 without Casts (reference only, see graph_passes.op).
"""

from __future__ import annotations

import onnx_graphsurgeon as gs

from graph_passes import op as woq_op
from graph_passes.passes._common import ONNX_FLOAT, PassRun, bias_storage, op_act_dtype
from graph_passes.op import weight_sums_of
from graph_passes.passes.epilogue import fuse_epilogues
from graph_passes.passes.match import constant_nbytes, find_linear_layers
from graph_passes.quantize import act_numpy_dtype, to_act_storage
from graph_passes.registry.act_modes import ACT_MODES
from graph_passes.report import QuantReport


def linear_attributes(m, config, has_zeros: bool, has_bias: bool) -> woq_op.WoqAttributes:
    return woq_op.WoqAttributes(bits=config.weight_format.bits, group_size=config.group_size, in_features=m.k,
                                out_features=m.n, layout=config.layout, has_zeros=int(has_zeros),
                                has_bias=int(has_bias), act_mode=ACT_MODES.get(config.act_mode).c_enum,
                                act_asymmetric=int(config.act_asymmetric))


def to_weight_only_linear(graph: gs.Graph, config, report: QuantReport | None = None) -> gs.Graph:
    """Replace every matched MatMul / MatMul+Add / Gemm of ``graph`` by a WeightOnlyLinear node; returns ``graph``."""
    return rewrite_to_plugin(graph, config, report, find_linear_layers, linear_attributes)


def rewrite_to_plugin(graph: gs.Graph, config, report, find, make_attributes) -> gs.Graph:
    """Replace every match of ``find`` by the op whose attributes ``make_attributes(match, config, has_zeros,
    has_bias)`` gives, then fuse the activations that follow; returns ``graph``."""
    run = PassRun(graph, config, report, find=find)
    report, names = run.report, run.names
    fmt = config.weight_format
    cast_in = {}
    created = []  # (op node, its report entry, the graph holding it)
    for m in run.matches:
        act, casts = op_act_dtype(m, config)
        storage = act_numpy_dtype(act)
        base = m.source_name + ("_T" if m.transpose else "")

        def build(qw, base=base, act=act, m=m):
            packed = gs.Constant(names(f"{base}_woq{qw.bits}_packed"), fmt.pack(qw.u))
            scales = gs.Constant(names(f"{base}_woq{qw.bits}_scales"), to_act_storage(qw.scales, act))
            zeros = (None if qw.zeros is None else
                     gs.Constant(names(f"{base}_woq{qw.bits}_zeros"), to_act_storage(qw.zeros, act)))
            sums = (gs.Constant(names(f"{base}_woq{qw.bits}_weight_sums"),
                                weight_sums_of(qw.u, qw.bits, config.group_size)) if config.act_asymmetric else None)
            after = sum(int(c.values.nbytes) for c in (packed, scales, zeros, sums) if c is not None)
            report.weight_bytes_before += constant_nbytes(m.source)
            report.weight_bytes_after += after
            return packed, scales, zeros, sums

        got = run.quantize(m, act, build)
        if got is None:
            continue
        (packed, scales, zeros, sums), shared = got
        attrs = make_attributes(m, config, zeros is not None, m.bias is not None)
        name = names.replacing(m.node, attrs.op_type)
        bias = None if m.bias is None else gs.Constant(names(f"{name}_bias"), bias_storage(m.bias, storage))
        # Disconnect the old node(s) first: their output tensor gets the new producer.
        out = m.output
        m.node.outputs.clear()
        if m.add_node is not None:
            m.add_node.outputs.clear()
        x = m.x
        if casts:  # one Cast per activation tensor and dtype (q/k/v projections share theirs)
            cast_key = (m.x.name, act, id(m.graph))  # a Cast inside one If branch is not visible in the other
            if cast_key not in cast_in:
                cast_in[cast_key] = m.graph.layer(op="Cast", name=names(f"{name}_cast_in"), inputs=[m.x],
                                                outputs=[gs.Variable(names(f"{m.x.name}_{act}"), dtype=storage)],
                                                attrs={"to": ONNX_FLOAT[act]})[0]
            x = cast_in[cast_key]
            y = gs.Variable(names(f"{name}_y_{act}"), dtype=storage)
        else:
            y = out
        woq_op.make_gs_node(m.graph, x, packed, scales, zeros, bias, y, attrs, name, weight_sums=sums)
        node = m.graph.nodes[-1]  # graph.layer appends the node it makes
        if casts:
            m.graph.layer(op="Cast", name=names(f"{name}_cast_out"), inputs=[y], outputs=[out],
                        attrs={"to": ONNX_FLOAT[m.graph_act]})
        run.rewritten(m, act, casts, shared)
        created.append((node, run.report.rewritten[-1], m.graph))
    _ensure_opset_import(graph)
    if config.fuse_activations:
        fuse_epilogues(created)
    return graph.cleanup().toposort()


def _ensure_opset_import(graph):
    import onnx

    domains = graph.import_domains
    if domains is None:
        graph.import_domains = domains = [onnx.helper.make_opsetid("", graph.opset)]
    if not any(d.domain == woq_op.DOMAIN for d in domains):
        domains.append(onnx.helper.make_opsetid(woq_op.DOMAIN, woq_op.OPSET_VERSION))
