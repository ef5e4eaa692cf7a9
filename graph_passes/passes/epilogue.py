"""Epilogue fusion: an activation following a rewritten WeightOnlyLinear / WeightOnlyConv node becomes the node's
``activation`` attribute (``graph_passes.registry.epilogues``), and the ONNX ops that computed it go away.

What follows the node's output (in an FP32 graph: the output of the Cast back to float32 that the pass inserted):
  * ``Clip`` with constant min / max (inputs, or attributes before opset 11) -> ``clip`` with ``clip_min`` /
    ``clip_max`` (a missing bound is infinite);
  * any other chain of elementwise ops (``ELEMENTWISE``) whose other inputs are scalar constants, and that consumes
    the output alone: ``Relu``, ``Sigmoid`` + ``Mul`` (SiLU), the ``Gelu`` op, the erf and tanh GELU subgraphs that
    exporters emit in any order of their multiplications. The chain grows node by node in graph order; whenever it
    is closed (nothing outside reads an intermediate tensor) it is evaluated in float64 on a test vector (up to
    +-6e4, so that a bound such as ``Min(x, 20)`` shows) and compared with every epilogue's reference, within the
    rounding of the chain's constants to their own dtype; the closest one that agrees is fused. Decomposed forms are
    therefore recognised by what they compute, not by their exact op order.
The Q/DQ twin (``graph_passes.compare``) writes the epilogue back as standard ops (:func:`twin_nodes`), so the twin
keeps the original op sequence's function.
"""

from __future__ import annotations

import math

import numpy as np

from graph_passes.passes.match import _dtype_of, _np_dtype, _resolve_constant, constant_values, escaping_tensors
from graph_passes.registry.epilogues import EPILOGUES, Epilogue, erf

ELEMENTWISE = ("Relu", "Sigmoid", "Tanh", "Erf", "Gelu", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Neg",
               "Sqrt")
MAX_NODES = 12                        # the longest decomposed GELU has 9
_LARGE = np.geomspace(10.0, 6e4, 16)
TEST_VECTOR = np.concatenate([np.linspace(-8.0, 8.0, 321), [-1e-3, 1e-3, 0.0], _LARGE, -_LARGE])
# Relative agreement by the dtype of the chain's constants: a few times what rounding GELU's constants to that dtype
# changes (float32 6e-9, fp16 3e-5, bf16 3e-4), well below a constant off by 0.2 % (5e-4 and more).
TOLERANCE = {"float32": 1e-5, "float64": 1e-5, "float16": 1e-4, "bfloat16": 1e-3}


def _constant(tensor):
    """(float64 value, dtype) of a one-element constant (initializer, Constant, behind Casts), else None."""
    r = _resolve_constant(tensor)
    if isinstance(r, str) or int(np.prod(r[0].shape)) != 1:
        return None
    const, _, chain, _ = r
    dtype = _np_dtype(chain[-1][1]) if chain else _dtype_of(const)
    return float(constant_values(const, chain, None).reshape(())), dtype


def _scalar(tensor):
    """The float64 value of a one-element constant (initializer, Constant, behind Cast), else None."""
    c = _constant(tensor)
    return None if c is None else c[0]


def _clip_bounds(node):
    """(clip_min, clip_max) of a Clip with constant bounds, else None."""
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    bounds = [-math.inf if lo is None else float(lo), math.inf if hi is None else float(hi)]
    for i, t in enumerate(node.inputs[1:3]):
        if t is None or not t.name:
            continue
        v = _scalar(t)
        if v is None:
            return None
        bounds[i] = v
    return tuple(bounds) if bounds[0] <= bounds[1] else None


def _evaluate(region, start, x):
    """float64 values of every region tensor for ``x`` at ``start``; None when a node cannot be evaluated."""
    vals = {id(start): x}
    with np.errstate(all="ignore"):
        for node in region:
            args = []
            for t in node.inputs:
                v = vals.get(id(t))
                args.append(_scalar(t) if v is None else v)
            if any(a is None for a in args):
                return None
            vals[id(node.outputs[0])] = _apply(node, args)
    return vals


def _apply(node, a):
    op = node.op
    if op == "Gelu":
        approx = node.attrs.get("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        return EPILOGUES.get("gelu_tanh" if approx == "tanh" else "gelu_erf").reference(a[0])
    unary = {"Relu": lambda v: np.maximum(v, 0.0), "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "Tanh": np.tanh,
             "Erf": erf, "Neg": np.negative, "Sqrt": np.sqrt}
    if op in unary:
        return unary[op](np.asarray(a[0], np.float64))
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
              "Max": np.maximum, "Min": np.minimum}
    out = np.asarray(a[0], np.float64)
    for v in a[1:]:
        out = binary[op](out, v)
    return out


def _closed(region, start, graph_outputs) -> bool:
    """Every tensor of the region but the last node's output is read only inside it and is no graph output."""
    inside = {id(n) for n in region}
    internal = [start] + [n.outputs[0] for n in region[:-1]]
    return all(id(t) not in graph_outputs and all(id(c) in inside for c in t.outputs) for t in internal)


def _tolerance(region, known) -> float:
    """The agreement :func:`_identify` asks of ``region``: that of its least precise floating-point constant."""
    tol = TOLERANCE["float32"]
    for node in region:
        for t in node.inputs:
            c = None if id(t) in known else _constant(t)
            if c is not None and c[1] is not None:  # integer constants (a Pow's exponent) are exact
                tol = max(tol, TOLERANCE.get(c[1].name, tol))
    return tol


def _identify(values, tol: float):
    """The epilogue (without parameters) whose reference agrees with ``values`` on the test vector, or None."""
    best = None
    for ep in EPILOGUES:
        if ep.name == "none" or ep.params:
            continue
        with np.errstate(over="ignore"):  # silu's exp(-y) at y = -6e4
            ref = ep.reference(TEST_VECTOR)
        err = float(np.max(np.abs(values - ref) / (1.0 + np.abs(ref))))
        if err <= tol and (best is None or err < best[1]):
            best = (ep, err)
    return None if best is None else best[0]


def _grow(start, graph, graph_outputs):
    """(epilogue, region nodes) for the elementwise chain after ``start``, or None."""
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    region, known = [], {id(start)}
    while len(region) < MAX_NODES:
        frontier = sorted({id(c): c for t in [start] + [n.outputs[0] for n in region] for c in t.outputs
                           if id(c) not in {id(r) for r in region}}.values(), key=lambda c: order.get(id(c), 0))
        nxt = next((c for c in frontier if c.op in ELEMENTWISE and len(c.outputs) == 1
                    and all(id(t) in known or _scalar(t) is not None for t in c.inputs)), None)
        if nxt is None:
            return None
        region.append(nxt)
        known.add(id(nxt.outputs[0]))
        if not _closed(region, start, graph_outputs):
            continue
        vals = _evaluate(region, start, TEST_VECTOR)
        if vals is None:
            return None
        out = np.broadcast_to(vals[id(region[-1].outputs[0])], TEST_VECTOR.shape)
        ep = _identify(out, _tolerance(region, known))
        if ep is not None:
            return ep, region
    return None


def match_epilogue(node, graph):
    """(epilogue, params, cast or None, region nodes) fusable after the op ``node``, or None."""
    graph_outputs = escaping_tensors(graph)  # also what a branch reads: its readers are not this graph's to fuse
    y = node.outputs[0]
    if id(y) in graph_outputs:
        return None
    consumers = list(y.outputs)
    cast = consumers[0] if len(consumers) == 1 and consumers[0].op == "Cast" else None
    start = cast.outputs[0] if cast is not None else y
    if id(start) in graph_outputs or not start.outputs:
        return None
    first = list(start.outputs)
    if len(first) == 1 and first[0].op == "Clip":
        bounds = _clip_bounds(first[0])
        if bounds is None:
            return None
        return EPILOGUES.get("clip"), dict(zip(EPILOGUES.get("clip").params, bounds)), cast, [first[0]]
    found = _grow(start, graph, graph_outputs)
    if found is None:
        return None
    return found[0], {}, cast, found[1]


def fuse_epilogues(created) -> None:
    """For each ``(op node, report entry, graph holding the node)`` in ``created``: fuse the activation that
    follows, if any (within that graph: a subgraph's outputs end the chain)."""
    for node, entry, graph in created:
        found = match_epilogue(node, graph)
        if found is None:
            continue
        ep, params, cast, region = found
        exit_tensor = region[-1].outputs[0]
        for n in region:
            n.outputs.clear()
            n.inputs.clear()
        (cast if cast is not None else node).outputs[0] = exit_tensor
        node.attrs["activation"] = ep.c_enum
        node.attrs.update({p: float(v) for p, v in params.items()})
        entry.activation = ep.name


def twin_nodes(ep: Epilogue, params: dict, x: str, y: str, prefix: str, dtype):
    """(onnx nodes, initializers) computing ``y = ep(x)`` with standard ops (opset >= 20), constants in ``dtype``."""
    from onnx import helper, numpy_helper

    if ep.name == "relu":
        return [helper.make_node("Relu", [x], [y], name=f"{prefix}.relu")], []
    if ep.name == "clip":
        names = [f"{prefix}.clip_min", f"{prefix}.clip_max"]
        with np.errstate(over="ignore"):  # a bound past the dtype's range (-FLT_MAX in fp16) is no bound: +-inf
            inits = [numpy_helper.from_array(np.asarray(params[p], dtype), n) for p, n in zip(ep.params, names)]
        return [helper.make_node("Clip", [x, *names], [y], name=f"{prefix}.clip")], inits
    if ep.name == "silu":
        return [helper.make_node("Sigmoid", [x], [f"{prefix}.sigmoid"], name=f"{prefix}.sigmoid"),
                helper.make_node("Mul", [x, f"{prefix}.sigmoid"], [y], name=f"{prefix}.silu")], []
    if ep.name in ("gelu_erf", "gelu_tanh"):
        approx = "tanh" if ep.name == "gelu_tanh" else "none"
        return [helper.make_node("Gelu", [x], [y], name=f"{prefix}.gelu", approximate=approx)], []
    raise ValueError(f"epilogue {ep.name!r} has no ONNX twin")
