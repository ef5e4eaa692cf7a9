"""Graph edit of AWQ: the linears reading activation X get ``diag(s) W`` and X is divided by ``s`` where it is made.

Where ``1/s`` goes, first that applies (only when X feeds nothing but the scaled linears and is no output of the
graph or of a body, so that no other reader of X sees the change):
  * X from ``LayerNormalization`` / ``SimplifiedLayerNormalization`` (last axis) with constant scale (and bias):
    both divided by s;
  * X from a ``Mul`` by a constant of K values (an RMSNorm's weight): that constant divided by s;
  * X from a linear ``MatMul`` (+ ``Add`` of a constant bias) with a constant [K_prev, K] weight that no other
    node reads: its weight's columns (and the bias) divided by s;
  * the same behind a ``Cast`` read by nothing else (a float32 norm inside an fp16 graph);
  * otherwise a new ``Mul(X, 1/s)``, in the graph where X is made (the main graph or an If / Loop / Scan body),
    feeds the scaled linears (X's other readers keep X).
New constants are created (a constant may be shared by other nodes); the graph dtype is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NORMS = ("LayerNormalization", "SimplifiedLayerNormalization")


@dataclass
class Fold:
    tensor: str         # the activation divided by s
    nodes: list[str]    # the linears whose weight rows were multiplied by s
    where: str          # what took 1/s, for the report

    def describe(self) -> str:
        return f"{', '.join(self.nodes)}: 1/s folded into {self.where}"


def _constant_values(t, base_dir: str | None):
    """Values of a constant tensor (external data read from ``base_dir``, the model's folder), or None."""
    import onnx_graphsurgeon as gs

    from graph_passes.passes.match import read_constant

    if isinstance(t, gs.Constant):
        return read_constant(t, base_dir)
    producers = list(getattr(t, "inputs", []))
    if len(producers) == 1 and producers[0].op == "Constant" and isinstance(producers[0].attrs.get("value"),
                                                                                gs.Constant):
        return read_constant(producers[0].attrs["value"], base_dir)
    return None


def _scaled_vector(t, k: int, inv: np.ndarray, base_dir: str | None):
    """Values of a constant holding K values (any shape ending in K, ones before) times ``inv``, or None."""
    v = _constant_values(t, base_dir)
    if v is None or v.dtype.kind != "f" or v.size != k or v.shape[-1:] != (k,):
        return None
    return (v.astype(np.float64) * inv.reshape(v.shape)).astype(v.dtype)


def _fold_into_norm(node, k, inv, const, base_dir) -> str | None:
    axis = int(node.attrs.get("axis", -1))
    if axis not in (-1, len(node.inputs[0].shape or []) - 1) or len(node.inputs) < 2:
        return None
    new = [_scaled_vector(t, k, inv, base_dir) for t in node.inputs[1:3]]
    if any(v is None for v in new):
        return None
    for i, v in enumerate(new, start=1):
        node.inputs[i] = const(f"{node.inputs[i].name}_awq", v)
    return f"{node.op} '{node.name}' (scale{' and bias' if len(new) > 1 else ''})"


def _fold_into_mul(node, k, inv, const, base_dir) -> str | None:
    """``node`` multiplies by a constant of K values (and by one other, computed, input)."""
    scaled = [(i, _scaled_vector(t, k, inv, base_dir)) for i, t in enumerate(node.inputs)]
    found = [(i, v) for i, v in scaled if v is not None]
    if len(node.inputs) != 2 or len(found) != 1:
        return None
    i, v = found[0]
    node.inputs[i] = const(f"{node.inputs[i].name}_awq", v)
    return f"Mul '{node.name}' (constant)"


def _fold_into_linear(node, k, inv, const, base_dir) -> str | None:
    """``node`` is the MatMul producing X, or the Add of a MatMul + bias."""
    import onnx_graphsurgeon as gs

    add = None
    if node.op == "Add":
        mms = [t.inputs[0] for t in node.inputs if len(t.inputs) == 1 and t.inputs[0].op == "MatMul"]
        if len(mms) != 1 or len(mms[0].outputs[0].outputs) != 1:
            return None
        add, node = node, mms[0]
    if node.op != "MatMul" or not isinstance(node.inputs[1], gs.Constant) or len(node.inputs[1].outputs) > 1:
        return None  # a weight that other nodes read too stays one weight
    w = _constant_values(node.inputs[1], base_dir)
    if w.ndim != 2 or w.shape[1] != k or w.dtype.kind != "f":
        return None
    bias_at = None
    if add is not None:
        bias_at = next(i for i, t in enumerate(add.inputs) if t is not node.outputs[0])
        bias = _scaled_vector(add.inputs[bias_at], k, inv, base_dir)
        if bias is None:
            return None
        add.inputs[bias_at] = const(f"{add.inputs[bias_at].name}_awq", bias)
    node.inputs[1] = const(f"{node.inputs[1].name}_awq", (w.astype(np.float64) * inv[None, :]).astype(w.dtype))
    return f"MatMul '{node.name}' (weight columns{' and bias' if add is not None else ''})"


def _single_use(t, outputs: set[int]) -> bool:
    return len(t.outputs) == 1 and id(t) not in outputs


def _owner(graphs: list, x):
    """The graph of ``graphs`` where ``x`` is made: its producer's, or the one it is an input of (a Loop body's
    iteration value); where a Mul reading it can go so that every reader, in that graph or in its bodies, sees it."""
    for g in graphs:
        if any(n is p for p in x.inputs for n in g.nodes) or any(t is x for t in g.inputs):
            return g
    return graphs[0]


def multiply_input(graph, x, nodes: list, inv: np.ndarray, names, dtype, tag: str) -> str:
    """A new ``Mul(x, inv)`` (``inv`` [K] float64, stored as ``dtype``) in the graph of ``graph`` or its bodies where
    ``x`` is made, read by ``nodes`` instead of ``x``; its name (``<x>_<tag>_mul``)."""
    import onnx_graphsurgeon as gs

    scaled = gs.Variable(names(f"{x.name}_{tag}"), dtype=dtype, shape=x.shape)
    mul = names(f"{x.name}_{tag}_mul")
    const = gs.Constant(names(f"{x.name}_{tag}_inv_scale"), np.ascontiguousarray(inv.astype(dtype)))
    _owner([graph, *graph.subgraphs(recursive=True)], x).layer(op="Mul", name=mul, inputs=[x, const],
                                                               outputs=[scaled])
    for n in nodes:
        n.inputs[0] = scaled
    return mul


def fold_input_scale(graph, x, nodes: list, scales: np.ndarray, names, dtype, base_dir: str | None = None) -> Fold:
    """Divide activation ``x`` (gs.Variable of numpy ``dtype``) of the linear ``nodes`` by ``scales`` [K] (see the
    module docstring). The nodes' weights must already be multiplied by ``scales``. ``names``: a NameScope;
    ``base_dir``: the model's folder, where constants stored as external data are read."""
    import onnx_graphsurgeon as gs

    k = scales.size
    inv = 1.0 / scales.astype(np.float64)

    def const(base: str, values: np.ndarray):
        return gs.Constant(names(base), np.ascontiguousarray(values))

    graphs = [graph, *graph.subgraphs(recursive=True)]
    outputs = {id(t) for g in graphs for t in g.outputs}
    node_ids = {id(n) for n in nodes}
    only_ours = all(id(c) in node_ids for c in x.outputs) and id(x) not in outputs
    where = None
    if only_ours and len(x.inputs) == 1:
        producer = x.inputs[0]
        if producer.op == "Cast" and _single_use(producer.inputs[0], outputs):  # an fp32 norm inside an fp16 graph
            producer = producer.inputs[0].inputs[0] if len(producer.inputs[0].inputs) == 1 else producer
        if producer.op in NORMS:
            where = _fold_into_norm(producer, k, inv, const, base_dir)
        elif producer.op == "Mul":
            where = _fold_into_mul(producer, k, inv, const, base_dir)
        elif producer.op in ("MatMul", "Add"):
            where = _fold_into_linear(producer, k, inv, const, base_dir)
    if where is None:
        where = f"a new Mul '{multiply_input(graph, x, nodes, inv, names, dtype, 'awq')}'"
    return Fold(tensor=x.name, nodes=[n.name for n in nodes], where=where)
