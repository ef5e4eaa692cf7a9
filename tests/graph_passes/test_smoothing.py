"""SmoothQuant smoothing (graph_passes.smoothing): the float function is kept, the scales follow the formula, and
W8A8 error drops on a layer whose input has outlier channels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import woq_models as models
from graph_passes import QuantConfig
from graph_passes.__main__ import main
from graph_passes.compare import plugin_to_qdq
from graph_passes.passes.scopes import all_graphs
from graph_passes.smoothing import smooth_model, smoothing_scales


def _outlier_mlp(rng, k=256, n=128, outliers=(3, 77), factor=60.0):
    """X -> LayerNorm-free MatMul+Add -> Relu -> MatMul, with a few input channels scaled up inside the graph (a
    constant Mul), as the residual streams of trained transformers have."""
    gain = np.ones(k, np.float32)
    gain[list(outliers)] = factor
    inits = [numpy_helper.from_array(gain, "gain"), numpy_helper.from_array(models.weight(rng, k, n), "w1"),
             numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array(models.weight(rng, n, k), "w2")]
    nodes = [helper.make_node("Mul", ["x", "gain"], ["xg"], name="gain"),
             helper.make_node("MatMul", ["xg", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
             helper.make_node("Relu", ["h1"], ["h2"], name="act"),
             helper.make_node("MatMul", ["h2", "w2"], ["y"], name="fc2")]
    return models.make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", k])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", k])], inits)


def _feeds(rng, count=4, k=256):
    return [{"x": rng.standard_normal((2, 16, k)).astype(np.float32)} for _ in range(count)]


def test_scales_formula_and_guards():
    a = np.array([4.0, 0.0, 1.0, 9.0])
    w = np.array([1.0, 2.0, 0.0, 0.25])
    s = smoothing_scales(a, w, 0.5)
    assert np.allclose(s, [2.0, 1.0, 1.0, 6.0])
    assert smoothing_scales(np.array([1e30]), np.array([1e-30]), 1.0)[0] == 1e5


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_smoothing_an_fp16_model_keeps_its_scales_in_fp16(rng, alpha):
    """An fp16 graph whose input has near-dead channels (max |x| ~ 1e-6) and others with large values: with alpha 1,
    s = max |x| alone would put 1 / s beyond fp16's range (inf, and NaN outputs); s and 1 / s stay normal fp16
    numbers and the smoothed graph computes what the original does, to fp16 rounding."""
    model = models.mlp(rng, dtype=np.float16, k=128, hidden=256)
    gain = np.ones(128)
    gain[:4], gain[4:8] = 1e-6, 300.0

    def x():
        return (rng.standard_normal((1, 16, 128)) * gain).astype(np.float16)

    config = QuantConfig(bits=8, group_size=-1, act_mode="w8a8", smooth_alpha=alpha)
    smoothed, _ = smooth_model(model, config, [{"x": x()} for _ in range(4)], alpha)
    inits = {t.name: numpy_helper.to_array(t) for t in smoothed.graph.initializer}
    scales = [v for name, v in inits.items() if "smooth_inv_scale" in name]
    assert scales and all(np.isfinite(v).all() and (np.abs(v) >= np.finfo(np.float16).tiny).all() for v in scales)
    xs = x()
    y0 = models.ort_run(model, {"x": xs})[0].astype(np.float64)
    y1 = models.ort_run(smoothed, {"x": xs})[0].astype(np.float64)
    assert np.isfinite(y1).all()
    assert np.linalg.norm(y1 - y0) < 3e-3 * np.linalg.norm(y0)


def test_smoothing_inside_if_branches_and_of_shared_weights(rng):
    """The merged decoder: the linears of both If branches are smoothed too (their activations' ranges gathered
    through the If, a Mul in the branch that makes each), a weight both branches read gets one scale and stays one
    constant, and both branches compute what they did."""
    import subgraph_models

    model = subgraph_models.merged_decoder(rng)
    feeds = [{"x": rng.standard_normal((1, 8, 128)).astype(np.float32), "use_cache_branch": np.array(i % 2 == 0)}
             for i in range(4)]
    config = QuantConfig(bits=8, group_size=-1, act_mode="w8a8", smooth_alpha=0.5)
    smoothed, res = smooth_model(model, config, feeds, 0.5)
    onnx.checker.check_model(smoothed, full_check=True)
    assert (res.smoothed, res.skipped) == (6, 1), res  # the else branch's Gemm is left as it is
    nodes = {n.name: n for g in all_graphs(smoothed.graph) for n in g.node}
    assert nodes["then_fc1"].input[1] == nodes["else_fc1"].input[1] != "w1"
    _assert_same_function_in_both_branches(rng, model, smoothed)


def _assert_same_function_in_both_branches(rng, model, smoothed):
    """The smoothed merged decoder computes what the original does, through either If branch (float64 check)."""
    for flag in (True, False):
        feed = {"x": rng.standard_normal((2, 5, 128)).astype(np.float32), "use_cache_branch": np.array(flag)}
        y0 = models.ort_run(model, feed)[0].astype(np.float64)
        y1 = models.ort_run(smoothed, feed)[0].astype(np.float64)
        assert np.linalg.norm(y1 - y0) < 1e-5 * np.linalg.norm(y0)


def test_smoothed_merged_decoder_packs_each_shared_weight_once(rng):
    """A weight that both If branches read (w1, and w3 of the nested If) is smoothed into one constant, and the W8A8
    model built from the smoothed graph packs it once, as it does without smoothing: the smoothed graph holds each
    scaled weight once, in the scope where every reader sees it."""
    import subgraph_models

    model = subgraph_models.merged_decoder(rng)
    feeds = [{"x": rng.standard_normal((1, 8, 128)).astype(np.float32), "use_cache_branch": np.array(i % 2 == 0)}
             for i in range(4)]
    config = QuantConfig(bits=8, group_size=-1, act_mode="w8a8", smooth_alpha=0.5)
    smoothed, _ = smooth_model(model, config, feeds, 0.5)
    inits = [t.name for g in all_graphs(smoothed.graph) for t in g.initializer]
    assert sorted(n for n in inits if n.endswith("_smoothed")) == ["w1_smoothed", "w2_smoothed", "w3_smoothed",
                                                                    "wl_smoothed"], inits

    def packed(m):
        return sorted(t.name for g in all_graphs(m.graph) for t in g.initializer if t.name.endswith("_packed"))

    plain, _ = models.run_pass(model, bits=8, group_size=-1, act_mode="w8a8")
    out, _ = models.run_pass(smoothed, bits=8, group_size=-1, act_mode="w8a8")
    assert len(packed(out)) == len(packed(plain)) == 5, (packed(out), packed(plain))
    _assert_same_function_in_both_branches(rng, model, smoothed)


def test_smoothing_keeps_the_float_function(rng):
    model = _outlier_mlp(rng)
    config = QuantConfig(bits=8, group_size=-1, act_mode="w8a8", smooth_alpha=0.5)
    smoothed, res = smooth_model(model, config, _feeds(rng), 0.5)
    assert (res.smoothed, res.tensors, res.skipped) == (2, 2, 0)
    onnx.checker.check_model(smoothed)
    x = rng.standard_normal((2, 5, 256)).astype(np.float32)
    y0 = models.ort_run(model, {"x": x})[0].astype(np.float64)
    y1 = models.ort_run(smoothed, {"x": x})[0].astype(np.float64)
    assert np.linalg.norm(y1 - y0) < 1e-5 * np.linalg.norm(y0)
    assert sum(n.op_type == "Mul" for n in smoothed.graph.node) == 3  # the model's gain + one per activation


def test_smoothing_lowers_w8a8_error_on_outlier_channels(rng, tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(_outlier_mlp(rng), src)
    feeds = _feeds(rng, 8)
    np.savez(tmp_path / "calib.npz", x=np.stack([f["x"] for f in feeds]))
    x = rng.standard_normal((2, 16, 256)).astype(np.float32)
    y0 = models.ort_run(onnx.load(str(src)), {"x": x})[0].astype(np.float64)
    errors = {}
    for label, extra in (("plain", []), ("smooth", ["--smooth-alpha", "0.5", "--calib-data",
                                                    str(tmp_path / "calib.npz")])):
        dst = tmp_path / f"{label}.onnx"
        argv = ["quantize", str(src), "-o", str(dst), "--bits", "8", "--group-size", "-1", "--act-mode", "w8a8"]
        assert main(argv + extra) == 0
        out = capsys.readouterr().out
        assert ("SmoothQuant (alpha 0.5, 8 calibration sample(s)): 2 layer(s)" in out) == (label == "smooth")
        y = models.ort_run(plugin_to_qdq(onnx.load(str(dst))), {"x": x})[0].astype(np.float64)
        errors[label] = np.linalg.norm(y - y0) / np.linalg.norm(y0)
    assert errors["smooth"] < 0.5 * errors["plain"], errors


@pytest.mark.parametrize("argv,msg", [(["--bits", "8", "--smooth-alpha", "0.5"], "needs a quantized activation mode"),
                                      (["--bits", "8", "--act-mode", "w8a8", "--smooth-alpha", "0.5"],
                                       "needs calibration data"),
                                      (["--bits", "8", "--act-mode", "w8a8", "--smooth-alpha", "1.5"],
                                       "must be in [0, 1]")])
def test_smoothing_refusals(rng, tmp_path, capsys, argv, msg):
    src = tmp_path / "m.onnx"
    onnx.save(_outlier_mlp(rng), src)
    assert main(["quantize", str(src), *argv]) == 2
    assert msg in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_smoothing_refuses_non_finite_calibration_activations(rng, tmp_path, capsys, bad):
    """NaN / Inf reaching a smoothed activation would give that channel s = 1 (NaN) or the clamp bound (Inf)
    without a word: refused in one line, naming the sample and the tensor, as the calibrated methods do."""
    src = tmp_path / "m.onnx"
    onnx.save(_outlier_mlp(rng), src)
    x = rng.standard_normal((3, 2, 16, 256)).astype(np.float32)
    x[1, 0, 3, 5] = bad
    np.savez(tmp_path / "c.npz", x=x)
    assert main(["quantize", str(src), "-o", str(tmp_path / "q.onnx"), "--bits", "8", "--act-mode", "w8a8",
                 "--smooth-alpha", "0.5", "--calib-data", str(tmp_path / "c.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calibration sample 1: input '" in err[0] and "NaN/Inf" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz", "m.onnx"]
