"""Initializers of subgraphs, after onnx-graphsurgeon's export: one copy of each weight, where every user sees it.

onnx-graphsurgeon exports a constant as an initializer of every graph whose nodes read it, so a weight shared by
the two branches of an If (an LLM exporter's merged decoder: with-past and without-past branches reading the same
initializers) comes out twice, packed or not. :func:`hoist_shared_initializers` keeps one copy in the main graph,
from where subgraphs read it as an outer-scope value, when every copy is the same tensor (same name, same bytes).
:func:`unique_value_names` gives the tensors that sibling subgraphs compute under one name names of their own.
"""

from __future__ import annotations


def node_bodies(node):
    """(attribute name, GraphProto) of each subgraph of ``node`` (an onnx.NodeProto): If's branches, a Loop's or
    Scan's body."""
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else list(a.graphs)):
            yield a.name, g


def all_graphs(graph):
    """``graph`` (an onnx.GraphProto) and, depth first, every subgraph of its If / Loop / Scan nodes."""
    yield graph
    for node in graph.node:
        for _, g in node_bodies(node):
            yield from all_graphs(g)


def _names(graph) -> set[str]:
    """Every name the main graph defines or uses itself (inputs, initializers, node inputs and outputs)."""
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names


def hoist_shared_initializers(model) -> int:
    """Moves subgraph initializers that are copies of one tensor into the main graph; returns how many copies were
    removed. A name bound to different bytes in two graphs (legal in sibling subgraphs) is left alone."""
    copies: dict[str, list] = {}
    subgraphs = list(all_graphs(model.graph))[1:]
    for g in subgraphs:
        for t in g.initializer:
            copies.setdefault(t.name, []).append((g, t))
    main = {t.name: t for t in model.graph.initializer}
    taken = _names(model.graph)
    for g in subgraphs:  # a name a subgraph computes or takes as input may not come from the main graph as well
        taken.update(i.name for i in g.input)
        taken.update(o for node in g.node for o in node.output)
    removed = 0
    for name, found in copies.items():
        first = main.get(name, found[0][1])
        if len(found) + (name in main) < 2:
            continue
        data = first.SerializeToString()
        if any(t.SerializeToString() != data for _, t in found if t is not first):
            continue
        if name not in main:
            if name in taken:  # the main graph uses the name for something else
                continue
            model.graph.initializer.append(first)
            removed -= 1
        for g, _ in found:
            kept = [t for t in g.initializer if t.name != name]
            del g.initializer[:]
            g.initializer.extend(kept)
            removed += 1
    return removed


def _rename(graph, names: dict[str, str]) -> None:
    """Every use and definition of ``names`` in ``graph`` and its subgraphs (no subgraph redefines them)."""
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        vi.name = names.get(vi.name, vi.name)
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
        for _, g in node_bodies(node):
            _rename(g, names)


def unique_value_names(model) -> int:
    """Renames the values (node outputs, body inputs) that a subgraph defines under a name another graph of the model
    defines too, legal in sibling subgraphs (optimum's merged decoder runs the same tensor names in both If
    branches), so that a name says which tensor it is: the calibration finds activations by name. ModelProto
    changed in place; returns how many were renamed. Initializers keep their names."""
    from graph_passes.passes._common import NameScope

    everything = set()
    for g in all_graphs(model.graph):
        everything.update(_names(g))
        everything.update(o.name for o in g.output)
    seen = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer} | \
        {o for n in model.graph.node for o in n.output}
    renamed = 0
    fresh = NameScope(used=everything)  # every value renamed is in `everything`: it gets a suffix

    def visit(graph) -> None:
        nonlocal renamed
        for node in graph.node:
            for _, body in node_bodies(node):
                values = [i.name for i in body.input] + [o for n in body.node for o in n.output if o]
                names = {v: fresh(v) for v in dict.fromkeys(values) if v in seen}
                if names:
                    _rename(body, names)
                    renamed += len(names)
                seen.update(names.get(v, v) for v in values)
                seen.update(t.name for t in body.initializer)
                visit(body)

    visit(model.graph)
    return renamed
