"""scopes.hoist_shared_initializers: one copy of a weight that several subgraphs hold, in the main graph."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graph_passes.passes.scopes import hoist_shared_initializers


def _model(values_a, values_b, main_uses_w=False):
    vi = helper.make_tensor_value_info

    def branch(tag, values):
        return helper.make_graph([helper.make_node("MatMul", ["x", "w"], [f"{tag}_y"], name=f"{tag}_mm")], tag, [],
                                 [vi(f"{tag}_y", TensorProto.FLOAT, None)],
                                 initializer=[numpy_helper.from_array(values, "w")])

    nodes = [helper.make_node("If", ["c"], ["y"], name="If_0", then_branch=branch("a", values_a),
                              else_branch=branch("b", values_b))]
    outputs = [vi("y", TensorProto.FLOAT, ["B", 4])]
    if main_uses_w:  # the main graph computes a tensor named w: hoisting would shadow it
        nodes.append(helper.make_node("Identity", ["x"], ["w"]))
        outputs.append(vi("w", TensorProto.FLOAT, ["B", 4]))
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, ["B", 4]), vi("c", TensorProto.BOOL, [])],
                              outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _inits(model):
    branches = {a.name: [t.name for t in a.g.initializer] for a in model.graph.node[0].attribute}
    return [t.name for t in model.graph.initializer], branches


def test_identical_copies_move_to_the_main_graph(rng):
    w = rng.standard_normal((4, 4)).astype(np.float32)
    model = _model(w, w.copy())
    assert hoist_shared_initializers(model) == 1
    assert _inits(model) == (["w"], {"then_branch": [], "else_branch": []})
    onnx.checker.check_model(model, full_check=True)


def test_different_tensors_or_taken_names_stay(rng):
    w = rng.standard_normal((4, 4)).astype(np.float32)
    for model in (_model(w, w + 1), _model(w, w.copy(), main_uses_w=True)):
        before = _inits(model)
        assert hoist_shared_initializers(model) == 0 and _inits(model) == before
