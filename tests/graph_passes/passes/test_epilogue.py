"""Epilogue fusion: each activation form exporters write after a linear / conv layer becomes the op's ``activation``;
the plugin model (float64 reference), its Q/DQ twin (ONNX Runtime) and the original agree."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import woq_models as models
from graph_passes.compare import plugin_to_qdq
from graph_passes.registry.epilogues import EPILOGUES

FORMS = {"relu": ("relu", {}), "relu6": ("clip", {"clip_min": 0.0, "clip_max": 6.0}),
         "clip_min_only": ("clip", {"clip_min": -1.5, "clip_max": np.inf}), "silu": ("silu", {}),
         "gelu_op_erf": ("gelu_erf", {}), "gelu_op_tanh": ("gelu_tanh", {}), "gelu_erf_div": ("gelu_erf", {}),
         "gelu_erf_half_first": ("gelu_erf", {}), "gelu_tanh_pow": ("gelu_tanh", {}),
         "gelu_tanh_mul": ("gelu_tanh", {})}


def _woq(model):
    return [n for n in model.graph.node if n.domain == "trt_woq"]


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("form", list(FORMS))
def test_each_pattern_fuses_and_twin_agrees(rng, form):
    name, params = FORMS[form]
    model = models.linear_act(rng, form)
    out, report = models.run_pass(model, bits=8, group_size=-1)
    (node,) = _woq(out)
    attrs = _attrs(node)
    ep = EPILOGUES.get(name)
    assert attrs["activation"] == ep.c_enum and report.rewritten[0].activation == name
    for p, v in params.items():
        assert attrs[p] == pytest.approx(v)
    assert [n.op_type for n in out.graph.node] == ["Cast", "WeightOnlyLinear", "Cast"]  # the activation ops are gone
    x = (rng.standard_normal((2, 3, 128)) * 2).astype(np.float32)
    y_ref = models.ref_run(out, {"x": x})[0]
    y_twin = models.ort_run(plugin_to_qdq(out), {"x": x})[0]
    y_orig = models.ort_run(model, {"x": x})[0]
    # The twin computes the same function in fp16 ONNX Runtime ops: fp16 rounding apart, equal to the reference.
    assert np.linalg.norm(y_twin - y_ref) <= 4e-3 * np.linalg.norm(y_ref)
    assert _cosine(y_ref, y_orig) > 0.999  # INT8 per channel


def test_twin_keeps_the_op_sequence(rng):
    out, _ = models.run_pass(models.linear_act(rng, "gelu_erf_div"), bits=4, group_size=64)
    ops = [n.op_type for n in plugin_to_qdq(out).graph.node]
    assert ops == ["Cast", "DequantizeLinear", "MatMul", "Add", "Gelu", "Cast"]
    out, _ = models.run_pass(models.linear_act(rng, "silu"), bits=4, group_size=64)
    assert [n.op_type for n in plugin_to_qdq(out).graph.node][-3:] == ["Sigmoid", "Mul", "Cast"]


def test_clip_attributes_of_opset_10(rng):
    """Clip(max=6) of opset 10 becomes, converted to opset 21, Clip with min -FLT_MAX: fused, and its fp16 twin
    clips at -inf without a numpy overflow warning."""
    model = models.linear_act(rng, "clip_attr_max_only", opset=10)
    out, report = models.run_pass(model, bits=8, group_size=-1)
    (node,) = _woq(out)
    attrs = _attrs(node)
    assert report.rewritten[0].activation == "clip" and attrs["clip_max"] == 6.0
    assert attrs["clip_min"] <= np.finfo(np.float32).min
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        twin = plugin_to_qdq(out)
    x = (rng.standard_normal((2, 3, 128)) * 20).astype(np.float32)
    y_ref = models.ref_run(out, {"x": x})[0]
    y_twin = models.ort_run(twin, {"x": x})[0]
    assert np.linalg.norm(y_twin - y_ref) <= 4e-3 * np.linalg.norm(y_ref) and y_ref.max() == np.float32(6.0)
    assert _cosine(y_ref, models.ort_run(model, {"x": x})[0]) > 0.999


def _with_extra_output(model, tensor):
    model.graph.output.append(helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, None))
    return model


@pytest.mark.parametrize("case", ["sigmoid_used_twice", "intermediate_is_output", "not_an_activation",
                                  "clip_beyond_8", "option_off"])
def test_what_is_not_fused(rng, case):
    cfg = dict(bits=8, group_size=-1)
    scale = 1.0
    if case == "sigmoid_used_twice":  # silu, but the Sigmoid's output also feeds a second graph output
        model = _with_extra_output(models.linear_act(rng, "silu"), "act_s")
    elif case == "intermediate_is_output":  # the pre-activation is a graph output too
        model = _with_extra_output(models.linear_act(rng, "relu"), "h1")
    elif case == "not_an_activation":  # 0.5 * x * (1 + tanh(x)): elementwise, but no epilogue computes it
        model = models.linear_act(rng, "relu")
        inits = list(model.graph.initializer) + [helper.make_tensor("half", onnx.TensorProto.FLOAT, [], [0.5]),
                                                 helper.make_tensor("one", onnx.TensorProto.FLOAT, [], [1.0])]
        mk = helper.make_node
        nodes = list(model.graph.node[:2]) + [mk("Tanh", ["h1"], ["t"]), mk("Add", ["t", "one"], ["a"]),
                                              mk("Mul", ["h1", "a"], ["m"]), mk("Mul", ["m", "half"], ["y"])]
        model = models.make_model(nodes, list(model.graph.input), list(model.graph.output), inits, 21)
    elif case == "clip_beyond_8":  # clip_by_value(x, 0, 20) as Min then Max: a ReLU only up to 20
        model = models.linear_act(rng, "relu")
        inits = list(model.graph.initializer) + [helper.make_tensor("lo", onnx.TensorProto.FLOAT, [], [0.0]),
                                                 helper.make_tensor("hi", onnx.TensorProto.FLOAT, [], [20.0])]
        mk = helper.make_node
        nodes = list(model.graph.node[:2]) + [mk("Min", ["h1", "hi"], ["m"]), mk("Max", ["m", "lo"], ["y"])]
        model = models.make_model(nodes, list(model.graph.input), list(model.graph.output), inits, 21)
        scale = 60.0  # pre-activations well past 20
    else:
        model = models.linear_act(rng, "relu")
        cfg["fuse_activations"] = False
    out, report = models.run_pass(model, **cfg)
    (node,) = _woq(out)
    assert _attrs(node)["activation"] == 0 and report.rewritten[0].activation == "none"
    x = (rng.standard_normal((2, 3, 128)) * scale).astype(np.float32)
    y_ref = models.ref_run(out, {"x": x})
    y_orig = models.ort_run(model, {"x": x})
    assert all(_cosine(a, b) > 0.999 for a, b in zip(y_ref, y_orig))


DECOMPOSED_GELU = [f for f in FORMS if f.startswith("gelu_") and not f.startswith("gelu_op")]


@pytest.mark.parametrize("value_info", [False, True], ids=["no_value_info", "value_info"])
@pytest.mark.parametrize("form", DECOMPOSED_GELU)
def test_fp16_graph_fuses_decomposed_gelu(rng, form, value_info):
    """An FP16 graph's decomposed GELU (constants in fp16) fuses, whether or not the graph declares the dtypes of its
    intermediate tensors (exported graphs often do not)."""
    model = models.conv(rng, act=form, dtype=np.float16)
    if value_info:
        model = onnx.shape_inference.infer_shapes(model)
    out, report = models.run_pass(model, bits=8, group_size=-1)
    assert report.rewritten[0].activation == FORMS[form][0]
    assert [n.op_type for n in out.graph.node] == ["WeightOnlyConv"]
    x = (rng.standard_normal((2, 64, 9, 11)) * 2).astype(np.float16)
    y_ref = models.ref_run(out, {"x": x})[0].astype(np.float64)
    y_twin = models.ort_run(plugin_to_qdq(out), {"x": x})[0].astype(np.float64)
    assert np.linalg.norm(y_twin - y_ref) <= 4e-3 * np.linalg.norm(y_ref)
    assert _cosine(y_ref, models.ort_run(model, {"x": x})[0]) > 0.999


@pytest.mark.parametrize("value_info", [False, True], ids=["no_value_info", "value_info"])
@pytest.mark.parametrize("form, constant, value", [("gelu_erf_div", "act_sqrt2", 1.41),
                                                   ("gelu_erf_div", "act_half", 0.501),
                                                   ("gelu_tanh_pow", "act_k", 0.046),
                                                   ("gelu_tanh_pow", "act_s", 0.8)])
def test_fp16_near_gelu_constants_do_not_fuse(rng, form, constant, value, value_info):
    """A GELU-like subgraph whose constant differs from GELU's by more than fp16 rounding is not GELU."""
    model = models.conv(rng, act=form, dtype=np.float16)
    (init,) = [t for t in model.graph.initializer if t.name == constant]
    init.CopyFrom(numpy_helper.from_array(np.asarray(value, np.float16), constant))
    if value_info:
        model = onnx.shape_inference.infer_shapes(model)
    out, report = models.run_pass(model, bits=8, group_size=-1)
    assert report.rewritten[0].activation == "none"
    x = (rng.standard_normal((2, 64, 9, 11)) * 2).astype(np.float16)
    assert _cosine(models.ref_run(out, {"x": x})[0], models.ort_run(model, {"x": x})[0]) > 0.999


def test_fused_inside_if_branches(rng):
    """The merged-decoder fixture has fc1 + Relu in both If branches: each branch's Relu is fused into its node."""
    from subgraph_models import merged_decoder

    from graph_passes.passes.scopes import all_graphs

    model = merged_decoder(rng, gemm_in_else=False)
    out, report = models.run_pass(model, bits=8, group_size=-1)
    fused = {r.node: r.activation for r in report.rewritten if r.activation != "none"}
    assert fused == {"If_0/then_branch/then_fc1": "relu", "If_0/else_branch/else_fc1": "relu"}
    assert not any(n.op_type == "Relu" for g in all_graphs(out.graph) for n in g.node)
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "use_cache_branch": np.array(flag)}
        y_twin = models.ort_run(plugin_to_qdq(out), feeds)[0]
        y_orig = models.ort_run(model, feeds)[0]
        assert _cosine(y_twin, y_orig) > 0.999


def test_cli_option_turns_fusion_off(rng, tmp_path):
    from graph_passes.__main__ import main

    src = tmp_path / "m.onnx"
    onnx.save(models.linear_act(rng, "silu"), src)
    for extra, activation in (([], EPILOGUES.get("silu").c_enum), (["--no-fuse-activations"], 0)):
        out = tmp_path / f"q{len(extra)}.onnx"
        assert main(["quantize", str(src), "-o", str(out), "-q", "--bits", "8", "--group-size", "-1", *extra]) == 0
        (node,) = _woq(onnx.load(out))
        assert _attrs(node)["activation"] == activation
