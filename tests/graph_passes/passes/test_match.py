"""Pattern finder: each pattern, the transforms of the weight, sharing keys, and the skip reasons."""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs
import pytest
from onnx import numpy_helper

import woq_models as models
from graph_passes import QuantConfig
from graph_passes.passes import find_linear_layers


def _find(model, **cfg):
    matches, skips = find_linear_layers(gs.import_onnx(model), QuantConfig(**cfg))
    return {m.node.name: m for m in matches}, {s.node.name: s for s in skips}


def _init(model, name):
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def test_matmul_and_matmul_add_rank3_dynamic(rng):
    model = models.mlp(rng)
    matches, skips = _find(model, group_size=64)
    assert not skips and set(matches) == {"fc1", "fc2"}
    fc1, fc2 = matches["fc1"], matches["fc2"]
    assert fc1.pattern == "MatMul+Add" and fc1.output.name == "h1" and fc1.add_node.name == "fc1_bias"
    assert np.array_equal(fc1.bias, _init(model, "b1").astype(np.float64))
    assert (fc1.k, fc1.n, fc2.k, fc2.n) == (128, 256, 256, 128)
    assert fc2.pattern == "MatMul" and fc2.bias is None and fc1.graph_act == "fp32"
    assert np.array_equal(fc1.load_weight(None), _init(model, "w1"))


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_alpha_beta_transb(rng, trans_b):
    model = models.gemm(rng, alpha=0.5, beta=2.0, trans_b=trans_b)
    matches, skips = _find(model)
    m = matches["gemm"]
    b = _init(model, "w")
    assert (m.k, m.n) == (128, 256) and m.pattern == "Gemm"
    assert np.array_equal(m.load_weight(None), (b.T if trans_b else b) * np.float32(0.5))
    assert np.array_equal(m.bias, _init(model, "c").astype(np.float64) * 2.0)


def test_gemm_refusals(rng):
    model = models.gemm(rng, c_shape=(1, 1))
    assert "Gemm C" in _find(model)[1]["gemm"].reason
    model = models.gemm(rng)
    model.graph.node[0].attribute.append(__import__("onnx").helper.make_attribute("transA", 1))
    assert "transA=1" in _find(model)[1]["gemm"].reason


def test_weight_behind_cast_and_transpose(rng):
    model = models.cast_transpose(rng)
    matches, skips = _find(model)
    assert not skips
    mc, mt = matches["mm_cast"], matches["mm_transpose"]
    assert mc.dtype == np.float16 and mc.graph_act == "fp16" and mc.chain == (("Cast", 10),)
    assert np.array_equal(mc.load_weight(None), _init(model, "w32").astype(np.float16).astype(np.float32))
    assert mt.chain == (("Transpose",),) and (mt.k, mt.n) == (128, 64)
    assert np.array_equal(mt.load_weight(None), _init(model, "wt").T.astype(np.float32))


def test_shared_weight_has_one_key(rng):
    matches, _ = _find(models.shared(rng))
    assert matches["mm_a"].key("fp16") == matches["mm_b"].key("fp16")
    assert matches["mm_b"].pattern == "MatMul+Add"


def test_skip_reasons(rng):
    matches, skips = _find(models.mixed(rng, nan=True))
    assert set(matches) == {"good", "nan_node"}  # NaN is found when quantizing (values are not loaded here)
    assert "K not a multiple of 64" in skips["bad_k"].reason
    assert "not constant" in skips["dynamic"].reason
    matches, skips = _find(models.mlp(rng, k=128, hidden=96), bits=4, group_size=64)
    assert "K not a multiple of" in skips["fc2"].reason and "fc1" in matches
    matches, skips = _find(models.mlp(rng, k=128, hidden=192), bits=4, group_size=128)
    assert "group size 128" in skips["fc2"].reason and "fc1" in matches
    matches, skips = _find(models.gemm(rng, k=128, n=66))
    assert "N not a multiple of 4" in skips["gemm"].reason


def test_name_filters_and_min_elements(rng):
    model = models.mlp(rng)
    matches, skips = _find(model, include=("fc1",))
    assert set(matches) == {"fc1"} and "--include" in skips["fc2"].reason
    matches, skips = _find(model, exclude=("^fc1$",))
    assert set(matches) == {"fc2"} and "--exclude" in skips["fc1"].reason
    matches, skips = _find(model, min_elements=128 * 256 + 1)
    assert not matches and all("min-elements" in s.reason for s in skips.values())


def test_transpose_perms(rng):
    from onnx import TensorProto, helper

    def model(perm, w_shape):
        vi = helper.make_tensor_value_info
        nodes = [helper.make_node("Transpose", ["w0"], ["w"], name="t", perm=perm),
                 helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
        return models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128])],
                                 [vi("y", TensorProto.FLOAT, ["B", 64])],
                                 [numpy_helper.from_array(models.weight(rng, *w_shape), "w0")])

    m = _find(model([0, 1], (128, 64)))[0]["mm"]
    assert m.chain == () and (m.k, m.n) == (128, 64)
    m = _find(model([1, 0], (64, 128)))[0]["mm"]
    assert m.chain == (("Transpose",),) and (m.k, m.n) == (128, 64)
    skips = _find(model([0, 2, 1], (128, 64)))[1]  # invalid for 2-D, but the finder must refuse, not crash
    assert "perm [0, 2, 1]" in skips["mm"].detail



def test_weight_behind_identity(rng):
    """torch.onnx writes a tied or repeated parameter as Identity(initializer): the weight is still that constant,
    and the Identity does not change its identity (nodes reading it directly share its packed copy)."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Identity", ["w"], ["w_id"], name="id"),
             helper.make_node("Transpose", ["w_id"], ["w_t"], name="t"),
             helper.make_node("Identity", ["w_t"], ["w_t_id"], name="id_t"),
             helper.make_node("MatMul", ["x", "w"], ["a"], name="direct"),
             helper.make_node("MatMul", ["x", "w_id"], ["b"], name="behind_identity"),
             helper.make_node("MatMul", ["x", "w_t_id"], ["c"], name="transposed")]
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128])],
                              [vi(n, TensorProto.FLOAT, ["B", 128]) for n in "abc"],
                              [numpy_helper.from_array(models.weight(rng, 128, 128), "w")])
    matches, skips = _find(model)
    assert not skips and set(matches) == {"direct", "behind_identity", "transposed"}
    assert matches["behind_identity"].key("fp16") == matches["direct"].key("fp16")
    assert matches["transposed"].chain == (("Transpose",),)
    assert np.array_equal(matches["behind_identity"].load_weight(None), _init(model, "w"))
    assert np.array_equal(matches["transposed"].load_weight(None), _init(model, "w").T)


def test_unnamed_nodes_are_named_by_their_output(rng):
    """Exporters may leave node names empty: reports and --include / --exclude then name a node by its op and output
    tensor (unique in its graph), not by an empty string."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    model = models.make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                               helper.make_node("MatMul", ["h", "w"], ["y"])],
                              [vi("x", TensorProto.FLOAT, ["B", 128])], [vi("y", TensorProto.FLOAT, ["B", 128])],
                              [numpy_helper.from_array(models.weight(rng, 128, 128), "w")])
    matches, _ = find_linear_layers(gs.import_onnx(model), QuantConfig())
    assert sorted(m.ref.name for m in matches) == ["MatMul:h", "MatMul:y"]
    matches, skips = find_linear_layers(gs.import_onnx(model), QuantConfig(exclude=("MatMul:y$",)))
    assert [m.ref.name for m in matches] == ["MatMul:h"] and [s.ref.name for s in skips] == ["MatMul:y"]

def test_subgraph_nodes_are_found_with_their_path_and_share_keys(rng):
    import subgraph_models as sm

    graph = gs.import_onnx(sm.merged_decoder(rng))
    matches, skips = find_linear_layers(graph, QuantConfig(group_size=64))
    by_path = {m.path: m for m in matches}
    assert not skips and sorted(by_path) == sorted(sm.LINEARS)
    then_fc1, else_fc1 = by_path["If_0/then_branch/then_fc1"], by_path["If_0/else_branch/else_fc1"]
    assert then_fc1.key("fp16") == else_fc1.key("fp16")  # w1 of the main graph, read in both branches
    assert then_fc1.pattern == "MatMul+Add" and then_fc1.ref.name == "If_0/then_branch/then_fc1"
    assert then_fc1.graph is not else_fc1.graph and then_fc1.graph is not graph
    assert by_path["lm_head"].graph is graph and by_path["lm_head"].ref.name == "lm_head"
    gemm = by_path["If_0/else_branch/else_fc2"]
    assert gemm.pattern == "Gemm" and gemm.transpose and (gemm.k, gemm.n) == (sm.HIDDEN, sm.K)
    inner = [by_path[p] for p in sm.LINEARS if "If_inner" in p]
    assert len({m.key("fp16") for m in inner}) == 1  # w3 of the then branch, read in both inner branches


def test_same_name_different_constants_do_not_share(rng):
    """Sibling subgraphs may each hold a local initializer of the same name: different tensors, different keys."""
    import onnx
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info

    def branch(tag):
        return helper.make_graph([helper.make_node("MatMul", ["x", "w"], [f"{tag}_y"], name=f"{tag}_mm")], tag, [],
                                 [vi(f"{tag}_y", TensorProto.FLOAT, None)],
                                 initializer=[numpy_helper.from_array(models.weight(rng, 128, 64), "w")])

    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="If_0", then_branch=branch("a"),
                                                else_branch=branch("b"))], "g",
                              [vi("x", TensorProto.FLOAT, ["B", 128]), vi("c", TensorProto.BOOL, [])],
                              [vi("y", TensorProto.FLOAT, ["B", 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    matches, _ = find_linear_layers(gs.import_onnx(model), QuantConfig())
    a, b = matches
    assert a.source_name == b.source_name == "w" and a.key("fp16") != b.key("fp16")
    onnx.checker.check_model(model)


def test_overridable_initializer_is_skipped(rng):
    from onnx import TensorProto, helper

    from graph_passes.passes.checks import keep_overridable_inputs

    model = models.mlp(rng)
    model.graph.input.append(helper.make_tensor_value_info("w1", TensorProto.FLOAT, [128, 256]))
    graph = gs.import_onnx(model)
    keep_overridable_inputs(model, graph)
    matches, skips = find_linear_layers(graph, QuantConfig(group_size=64))
    assert [m.node.name for m in matches] == ["fc2"]
    assert skips[0].node.name == "fc1" and "overridable" in skips[0].reason and "'w1'" in skips[0].detail
