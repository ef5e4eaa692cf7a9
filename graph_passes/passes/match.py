"""Pattern finder: the linear layers of a graph that the rewrite passes can quantize, and why the others are skipped.

Patterns, in the main graph and in the bodies of If / Loop / Scan nodes (recursively; a subgraph node is named by its
path, ``If_0/then_branch/MatMul_3``, in reports and for --include / --exclude; a node without a name by its op and
output, ``MatMul:logits``):
  * ``MatMul(X, W)``: W a constant 2-D weight: an initializer or a Constant node, optionally behind Identity, Cast
    and/or Transpose nodes (``perm`` [1, 0]); X of any rank >= 2 with dynamic dims.
  * ``MatMul`` + ``Add(., b)``: b a constant of N values ([N] or [1, N]) -> bias folded into the op.
  * ``Gemm(A, B, C)``: transA = 0, transB 0 or 1, alpha folded into W, constant C of N values times beta as bias.
A weight used by several nodes (same source tensor, same transforms; also from several branches) is quantized and
packed once: matches carry a ``key`` for that. A weight that is also a graph input (an overridable initializer) stays
float. Nothing here loads weight values, except biases (N values); NaN/Inf checks happen when quantizing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graph_passes.layouts import get_layout
from graph_passes.quantize import act_dtype_name


@dataclass(frozen=True)
class NodeRef:
    """What a report records of a node: its path (its name in the main graph) and op."""

    name: str
    op: str


@dataclass
class LinearMatch:
    node: object                 # gs.Node: MatMul or Gemm
    pattern: str                 # "MatMul", "MatMul+Add", "Gemm"
    x: object                    # gs.Tensor: the activation
    output: object               # gs.Tensor: what the rewritten subgraph must produce
    source: object               # gs.Constant holding the weight's data
    source_name: str
    chain: tuple = ()            # transforms applied to the source, in order: ("Cast", onnx_dtype) / ("Transpose",)
    transpose: bool = False      # W = transform(source).T (odd number of transposes incl. Gemm transB)
    alpha: float = 1.0
    bias: np.ndarray | None = None   # float64 [N], beta folded
    add_node: object = None      # the Add folded as bias
    dtype: np.dtype = None       # activation / weight dtype of the graph at this node
    k: int = 0
    n: int = 0
    extra_nodes: list = field(default_factory=list)
    graph: object = None         # gs.Graph holding the node (the main graph or a subgraph)
    path: str = ""               # node name, prefixed by the If / Loop / Scan nodes and attributes it lies in

    @property
    def ref(self) -> NodeRef:
        return NodeRef(self.path or self.node.name, self.node.op)

    @property
    def graph_act(self) -> str:
        return act_dtype_name(self.dtype)

    def key(self, act_dtype: str) -> tuple:
        """Identity of the quantized weight: nodes with equal keys share one packed tensor."""
        return (self.source_name, id(self.source), self.chain, self.transpose, self.alpha, act_dtype)

    def load_weight(self, base_dir: str | None) -> np.ndarray:
        """The float32 ``W[K, N]`` this node multiplies by (transforms and alpha applied); a fresh array."""
        w = read_constant(self.source, base_dir)
        for step in self.chain:
            if step[0] == "Cast":
                w = w.astype(_np_dtype(step[1]))
            else:
                w = w.T
        w = np.asarray(w, np.float32)
        if self.transpose:
            w = w.T
        if self.alpha != 1.0:
            w = w * np.float32(self.alpha)
        return np.ascontiguousarray(w)


@dataclass
class Skip:
    node: object
    reason: str
    detail: str = ""
    path: str = ""

    @property
    def ref(self) -> NodeRef:
        return NodeRef(self.path or self.node.name, self.node.op)


# ------------------------------------------------------------------------------------------------------- helpers
def _np_dtype(onnx_dtype):
    import onnx

    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(onnx_dtype)))


def _dtype_of(tensor) -> np.dtype | None:
    dt = getattr(tensor, "dtype", None)
    if dt is None:
        return None
    try:
        return np.dtype(dt)
    except TypeError:
        try:
            return _np_dtype(dt)
        except Exception:  # noqa: BLE001 - an unknown type is reported as unsupported by the caller
            return None


def read_constant(const, base_dir: str | None) -> np.ndarray:
    """Values of a gs.Constant without caching them in the graph (external data read from ``base_dir``)."""
    import onnx
    from onnx_graphsurgeon.ir.tensor import LazyValues

    vals = const._values
    if not isinstance(vals, LazyValues):
        return np.asarray(vals)
    proto = vals.tensor
    if proto.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in proto.external_data}
        import os

        path = os.path.join(base_dir or ".", info["location"])
        dtype = _np_dtype(proto.data_type)
        count = int(np.prod(proto.dims)) if len(proto.dims) else 1
        with open(path, "rb") as f:
            f.seek(int(info.get("offset", 0)))
            data = np.fromfile(f, dtype=dtype, count=count)
        if data.size != count:
            raise OSError(f"external data file {path} is too short for tensor {proto.name}")
        return data.reshape(tuple(proto.dims))
    return np.asarray(onnx.numpy_helper.to_array(proto))


def constant_nbytes(const) -> int:
    from onnx_graphsurgeon.ir.tensor import LazyValues

    vals = const._values
    return int(vals.nbytes) if isinstance(vals, LazyValues) else int(np.asarray(vals).nbytes)


def _resolve_constant(tensor, max_depth: int = 4):
    """Follow Identity / Cast / Transpose producers back to a constant: (gs.Constant, name, chain, n_transposes) or a
    reason."""
    import onnx_graphsurgeon as gs

    chain = []
    transposes = 0
    bad_perm = None
    t = tensor
    for _ in range(max_depth + 1):
        if isinstance(t, gs.Constant):
            break
        producers = list(t.inputs)
        if len(producers) != 1:
            return f"input '{tensor.name}' is not a constant (initializer or Constant node)"
        p = producers[0]
        if p.op == "Constant" and isinstance(p.attrs.get("value"), gs.Constant):
            break
        if p.op == "Identity" and p.inputs:  # torch.onnx's form of a tied or repeated parameter
            pass
        elif p.op == "Cast" and p.inputs:
            chain.append(("Cast", int(p.attrs["to"])))
        elif p.op == "Transpose" and p.inputs:
            perm = None if p.attrs.get("perm") is None else list(p.attrs["perm"])
            if perm not in (None, [1, 0], [0, 1]):
                bad_perm = perm
            elif perm != [0, 1]:  # [0, 1] is the identity
                chain.append(("Transpose",))
                transposes += 1
        else:
            what = "" if t is tensor else f" (through {len(chain)} Cast/Transpose node(s))"
            return f"input '{tensor.name}' is computed by a {p.op} node{what}, not a constant"
        t = p.inputs[0]
    else:
        return f"input '{tensor.name}' is a constant behind more than {max_depth} Cast/Transpose nodes"
    if bad_perm is not None:
        return f"constant input '{tensor.name}' comes through a Transpose with perm {bad_perm} (only [1, 0])"
    if isinstance(t, gs.Constant):
        return t, t.name, tuple(reversed(chain)), transposes
    return t.inputs[0].attrs["value"], t.name, tuple(reversed(chain)), transposes


def _bias_values(tensor, n: int, x_rank: int | None, base_dir):
    """float64 [N] from a constant bias of N values ([N] or [1, N]), or a reason string."""
    r = _resolve_constant(tensor)
    if isinstance(r, str):
        return r
    const, _, chain, transposes = r
    shape = tuple(const.shape)
    if transposes or int(np.prod(shape)) != n or (shape and shape[-1] != n) or any(d != 1 for d in shape[:-1]):
        return f"bias of shape {list(shape)} is not a vector of N={n} values"
    if len(shape) > 2 or (x_rank is not None and len(shape) > x_rank):
        return f"bias of shape {list(shape)} would broadcast the output to a higher rank"
    return constant_values(const, chain, base_dir).reshape(n)


def constant_values(const, chain, base_dir) -> np.ndarray:
    """float64 values of ``const`` after the Casts of ``chain``."""
    v = read_constant(const, base_dir)
    for step in chain:
        v = v.astype(_np_dtype(step[1]))
    return np.asarray(v, np.float64)


def _rank(tensor):
    shape = getattr(tensor, "shape", None)
    return None if shape is None else len(shape)


# ---------------------------------------------------------------------------------------------------------- finder
def scoped_graphs(graph, prefix: str = ""):
    """(gs.Graph, path prefix) of ``graph`` and, depth first, of every subgraph of its If / Loop / Scan nodes."""
    import onnx_graphsurgeon as gs

    yield graph, prefix
    for node in graph.nodes:
        for attr, value in node.attrs.items():
            if isinstance(value, gs.Graph):
                yield from scoped_graphs(value, f"{prefix}{node.name or node.op}/{attr}/")


def find_linear_layers(graph, config) -> tuple[list[LinearMatch], list[Skip]]:
    """The quantizable MatMul / Gemm nodes of ``graph`` and its subgraphs, and the skipped ones with a reason each."""
    return find_layers(graph, config, ("MatMul", "Gemm"), _match_node, _shape_reason)


def find_layers(graph, config, op_types, match_node, shape_reason):
    """(matches, skips) over the nodes of ``op_types`` in ``graph`` and its subgraphs: ``match_node(node, config,
    graph_output_ids, overridable_ids)`` gives a match or a Skip (graph_output_ids: the tensors read outside the
    node's graph, :func:`escaping_tensors`), ``shape_reason(match, config, layout)`` a (reason, detail) tuple or
    None; then --include / --exclude and --min-elements (:func:`_selected`)."""
    matches, skips = [], []
    layout = get_layout(config.layout)
    overridable = {id(t) for t in graph.inputs}  # initializers kept as graph inputs (checks.keep_overridable_inputs)
    for sub, prefix in scoped_graphs(graph):
        graph_outputs = escaping_tensors(sub)
        for node in sub.nodes:
            if node.op not in op_types:
                continue
            path = prefix + (node.name or f"{node.op}:{node.outputs[0].name if node.outputs else ''}")
            m = match_node(node, config, graph_outputs, overridable)
            if not isinstance(m, Skip):
                m.graph, m.path = sub, path
                m = _selected(m, config, layout, shape_reason)
            if isinstance(m, Skip):
                m.path = path
                skips.append(m)
            else:
                matches.append(m)
    return matches, skips


def escaping_tensors(graph) -> set[int]:
    """ids of the tensors of ``graph`` read outside its own nodes: its outputs, and the values that the bodies of its
    If / Loop / Scan nodes read from it. A node producing one of them cannot absorb the readers into itself."""
    local = {id(n) for n in graph.nodes}
    read_outside = {id(t) for n in graph.nodes for t in n.outputs if any(id(c) not in local for c in t.outputs)}
    return {id(t) for t in graph.outputs} | read_outside


def _selected(m: LinearMatch, config, layout, shape_reason):
    """``m``, or the Skip of a match that the shapes, the name filters or --min-elements leave out."""
    reason = shape_reason(m, config, layout)
    if reason:
        return Skip(m.node, *reason)
    filtered = config.name_filter_reason(m.path)
    if filtered:
        return Skip(m.node, filtered)
    if m.k * m.n < config.min_elements:
        return Skip(m.node, f"fewer than --min-elements {config.min_elements} weights", f"K x N = {m.k} x {m.n}")
    return m


def _shape_reason(m: LinearMatch, config, layout):
    if m.graph_act is None:
        return ("activation dtype not fp32/fp16/bf16", f"dtype {m.dtype}")
    if m.k % layout.K_TILE:
        return (f"K not a multiple of {layout.K_TILE} (layout {layout.NAME})", f"K={m.k}, N={m.n}")
    inter = layout.interleave_factor(config.bits)
    if m.n % inter:
        return (f"N not a multiple of {inter} ({config.weight_format.label} interleave)", f"K={m.k}, N={m.n}")
    if config.group_size != -1 and m.k % config.group_size:
        return (f"K not a multiple of group size {config.group_size}", f"K={m.k}")
    return None


def following_add(node, graph_outputs):
    """(Add node, its other input) when the only reader of ``node``'s output is a two-input Add, else None."""
    out = node.outputs[0]
    consumers = list(out.outputs)
    if len(consumers) != 1 or consumers[0].op != "Add" or id(out) in graph_outputs:
        return None
    add = consumers[0]
    other = [t for t in add.inputs if t is not out]
    return (add, other[0]) if len(add.inputs) == 2 and len(other) == 1 else None


def weight_source(node, tensor, overridable):
    """``(constant, name, chain, transposes)`` of the weight ``tensor`` of ``node``, or the Skip saying why not (not
    a constant, or an initializer that is also a graph input: callers may replace it, so it stays float)."""
    r = _resolve_constant(tensor)
    if isinstance(r, str):
        return Skip(node, "weight is not constant", r)
    if id(r[0]) in overridable:
        return Skip(node, "weight is an overridable graph input",
                    f"initializer '{r[1]}' is also a graph input: callers may replace it, so it stays float; to "
                    f"quantize it, remove it from the graph inputs (onnxruntime's "
                    f"tools/python/remove_initializer_from_input.py does)")
    return r


def _match_node(node, config, graph_outputs, overridable):
    if len(node.inputs) < 2 or not node.outputs:
        return Skip(node, "malformed node (fewer than 2 inputs)")
    x, b = node.inputs[0], node.inputs[1]
    alpha, beta, trans_b = 1.0, 1.0, 0
    if node.op == "Gemm":
        if int(node.attrs.get("transA", 0)):
            return Skip(node, "Gemm with transA=1 (unsupported)")
        alpha = float(node.attrs.get("alpha", 1.0))
        beta = float(node.attrs.get("beta", 1.0))
        trans_b = int(node.attrs.get("transB", 0))
    r = weight_source(node, b, overridable)
    if isinstance(r, Skip):
        return r
    source, source_name, chain, transposes = r
    shape = tuple(source.shape)
    if len(shape) != 2:
        return Skip(node, "weight is not 2-D", f"shape {list(shape)}")
    casts = [step for step in chain if step[0] == "Cast"]
    dtype = _np_dtype(casts[-1][1]) if casts else _dtype_of(source)
    # load_weight applies the chain's transposes, then Gemm's transB; K and N follow the total count.
    k, n = (shape[1], shape[0]) if (transposes + trans_b) % 2 else shape
    x_rank = _rank(x)
    if x_rank is not None and x_rank < 2:
        return Skip(node, "activation rank < 2", f"rank {x_rank}")
    m = LinearMatch(node=node, pattern=node.op, x=x, output=node.outputs[0], source=source, source_name=source_name,
                    chain=chain, transpose=bool(trans_b), alpha=alpha, dtype=dtype, k=int(k), n=int(n))
    base_dir = config.external_data_dir
    if node.op == "Gemm":
        if x_rank is not None and x_rank != 2:
            return Skip(node, "Gemm activation is not 2-D", f"rank {x_rank}")
        if len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].name:
            bias = _bias_values(node.inputs[2], m.n, 2, base_dir)
            if isinstance(bias, str):
                return Skip(node, "Gemm C is not a constant bias of N values", bias)
            m.bias = bias * beta
        return m
    # MatMul: fold a following Add of a constant [N] vector.
    found = following_add(node, graph_outputs)
    if found is not None:
        add, other = found
        bias = _bias_values(other, m.n, x_rank, base_dir)
        if not isinstance(bias, str):
            m.bias, m.add_node, m.output, m.pattern = bias, add, add.outputs[0], "MatMul+Add"
    return m
