"""scopes.hoist_shared_initializers: one copy of a weight that several subgraphs hold, in the main graph."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graph_passes.passes.scopes import all_graphs, hoist_shared_initializers, unique_value_names


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


def test_unique_value_names_keeps_the_function(rng):
    """Both If branches compute xs, h, a, y under the same names, y also the If's output (optimum's merged decoder):
    the else branch's four and the then branch's y get names of their own, initializers keep theirs, and the model
    computes what it did in either branch."""
    import subgraph_models
    from woq_models import ort_run

    model = subgraph_models.merged_decoder_same_names(rng)
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    assert unique_value_names(renamed) == 5
    onnx.checker.check_model(renamed, full_check=True)
    values = [o for g in all_graphs(renamed.graph) for n in g.node for o in n.output]
    assert len(values) == len(set(values)), values
    assert [[t.name for t in g.initializer] for g in all_graphs(renamed.graph)] == \
        [[t.name for t in g.initializer] for g in all_graphs(model.graph)]
    for flag in (True, False):
        feed = {"x": rng.standard_normal((2, 5, 128)).astype(np.float32), "use_cache_branch": np.array(flag)}
        np.testing.assert_array_equal(ort_run(renamed, feed)[0], ort_run(model, feed)[0])
    assert unique_value_names(renamed) == 0
