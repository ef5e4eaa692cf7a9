"""graph_passes.compare: the Q/DQ twin of a plugin-format model, the generated inputs, the error figures, PASSED/FAILED.

The plugin-format fixtures are built here by hand (a small RTN quantizer and layout v1's packer), independently of
the quantizer's passes, so that the twin is checked against a float64 reference of the very values in the file."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import woq_models as models
from graph_passes.compare import (CompareReport, compare, compare_arrays, make_inputs, plugin_to_qdq)
from graph_passes.errors import UserError
from graph_passes.layouts import interleaved_v1

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None


def _rtn(w: np.ndarray, bits: int, group: int, asym: bool, act: np.dtype):
    """Plain max-abs / min-max RTN: (u uint8 [K, N], scales act [K/G, N], zeros act [K/G, N] or None)."""
    k, n = w.shape
    g = k if group == -1 else group
    wg = w.reshape(k // g, g, n).astype(np.float64)
    if asym:
        lo, hi = wg.min(1), wg.max(1)
        s = np.maximum(hi - lo, 1e-8) / ((1 << bits) - 1)
        s = s.astype(act).astype(np.float64)
        z = np.clip(np.round(-lo / s), 0, (1 << bits) - 1)
    else:
        s = np.maximum(np.abs(wg).max(1), 1e-8) / ((1 << (bits - 1)) - 1)
        s = s.astype(act).astype(np.float64)
        z = np.full_like(s, 1 << (bits - 1))
    u = np.clip(np.round(wg / s[:, None, :]) + z[:, None, :], 0, (1 << bits) - 1).astype(np.uint8).reshape(k, n)
    return u, s.astype(act), (z.astype(act) if asym else None)


def _dequant(u, s, z, bits, group):
    k, n = u.shape
    g = k if group == -1 else group
    zz = np.repeat(z.astype(np.float64), g, 0) if z is not None else float(1 << (bits - 1))
    return (u.astype(np.float64) - zz) * np.repeat(s.astype(np.float64), g, 0)


def _models(tmp_path, rng, *, k=256, n=64, bits=4, group=128, asym=False, bias=False, act="fp16", ids=False):
    """(original fp32 model path, plugin-format model path, float64 dequantized weight, bias or None).

    Graph: [input_ids -> Gather(table)] or x [batch, seq, K] -> MatMul(W) [+ Add(b)] -> y. The plugin model casts to
    the activation dtype around the WeightOnlyLinear node, as the quantizer does in an FP32 graph."""
    act_np = np.dtype(np.float16) if act == "fp16" else np.dtype(ml_dtypes.bfloat16)
    act_onnx = TensorProto.FLOAT16 if act == "fp16" else TensorProto.BFLOAT16
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    u, s, z = _rtn(w, bits, group, asym, act_np)

    def graph(nodes, inits):
        if ids:
            inp = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
            inits = inits + [numpy_helper.from_array(rng.standard_normal((100, k)).astype(np.float32), "table")]
            nodes = [helper.make_node("Gather", ["table", "input_ids"], ["x"], name="embed")] + nodes
        else:
            inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", n])
        return helper.make_graph(nodes, "g", [inp], [out], initializer=inits)

    # Original
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm" if bias else "y"], name="proj")]
    inits = [numpy_helper.from_array(w, "W")]
    if bias:
        nodes.append(helper.make_node("Add", ["mm", "b"], ["y"], name="proj_bias"))
        inits.append(numpy_helper.from_array(b, "b"))
    original = helper.make_model(graph(nodes, inits), opset_imports=[helper.make_opsetid("", 21)])
    original.ir_version = 10

    # Plugin format
    packed = interleaved_v1.pack(u, bits)
    inputs = ["x_act", "proj.packed", "proj.scales"]
    inits = [numpy_helper.from_array(packed, "proj.packed"), numpy_helper.from_array(s, "proj.scales")]
    if asym:
        inputs.append("proj.zeros")
        inits.append(numpy_helper.from_array(z, "proj.zeros"))
    if bias:
        inputs.append("proj.bias")
        inits.append(numpy_helper.from_array(b.astype(act_np), "proj.bias"))
    nodes = [helper.make_node("Cast", ["x"], ["x_act"], name="cast_in", to=act_onnx),
             helper.make_node("WeightOnlyLinear", inputs, ["y_act"], name="proj", domain="trt_woq", bits=bits,
                              group_size=group, in_features=k, out_features=n, layout=1, has_zeros=int(asym),
                              has_bias=int(bias), plugin_version="1", plugin_namespace=""),
             helper.make_node("Cast", ["y_act"], ["y"], name="cast_out", to=TensorProto.FLOAT)]
    plugin = helper.make_model(graph(nodes, inits), opset_imports=[helper.make_opsetid("", 21),
                                                                    helper.make_opsetid("trt_woq", 1)])
    plugin.ir_version = 10
    onnx.checker.check_model(original)
    onnx.checker.check_model(plugin)
    o_path, p_path = tmp_path / "original.onnx", tmp_path / "plugin.onnx"
    onnx.save(original, o_path)
    onnx.save(plugin, p_path)
    return o_path, p_path, _dequant(u, s, z, bits, group), (b.astype(act_np).astype(np.float64) if bias else None)


def _basic_session(model):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


CASES = [  # bits, group, asym, bias, act
    (4, 128, False, False, "fp16"),
    (4, 128, True, True, "fp16"),
    (4, 32, True, False, "fp16"),
    (4, -1, False, True, "fp16"),
    (8, -1, False, False, "fp16"),
    (8, 64, True, True, "fp16"),
    (4, 128, True, True, "bf16"),
]


@pytest.mark.parametrize("bits,group,asym,bias,act", CASES)
def test_qdq_twin_matches_float64_reference(tmp_path, bits, group, asym, bias, act):
    if act == "bf16" and ml_dtypes is None:
        pytest.skip("bf16 fixtures need ml_dtypes")
    rng = np.random.default_rng()
    _, p_path, w_deq, b = _models(tmp_path, rng, bits=bits, group=group, asym=asym, bias=bias, act=act)
    twin = plugin_to_qdq(onnx.load(p_path))
    onnx.checker.check_model(twin, full_check=True)
    assert not any(nd.domain == "trt_woq" for nd in twin.graph.node)
    assert [o.domain for o in twin.opset_import] == [""]
    dq = [nd for nd in twin.graph.node if nd.op_type == "DequantizeLinear"]
    assert len(dq) == 1
    block = {a.name: a.i for a in dq[0].attribute}.get("block_size", 0)
    assert block == (0 if group == -1 else group)

    x = rng.standard_normal((3, 5, 256)).astype(np.float32)
    y = _basic_session(twin).run(None, {"x": x})[0].astype(np.float64)
    act_np = np.float16 if act == "fp16" else ml_dtypes.bfloat16
    ref = x.astype(act_np).astype(np.float64) @ w_deq + (0 if b is None else b)
    rel = np.abs(y - ref).max() / np.abs(ref).max()
    # fp16: weights and output rounded to fp16 (2^-11); bf16 computes in fp32 and rounds the output (2^-8).
    assert rel < (4e-3 if act == "fp16" else 1.6e-2), rel


def test_qdq_twin_agrees_with_reference_evaluator(tmp_path):
    """The twin and the op's numpy reference evaluator (graph_passes.op) read the packed tensors the same way."""
    op = pytest.importorskip("graph_passes.op", reason="graph_passes.op (the op reference) is not present")
    rng = np.random.default_rng()
    _, p_path, _, _ = _models(tmp_path, rng, bits=4, group=64, asym=True, bias=True)
    model = onnx.load(p_path)
    x = rng.standard_normal((2, 7, 256)).astype(np.float32)
    y_ref = op.reference_evaluator(model).run(None, {"x": x})[0].astype(np.float64)
    y_twin = _basic_session(plugin_to_qdq(model)).run(None, {"x": x})[0].astype(np.float64)
    assert np.abs(y_twin - y_ref).max() / np.abs(y_ref).max() < 4e-3


@pytest.mark.parametrize("bits,group,asym", [(8, -1, False), (4, 128, False), (4, 128, True)])
def test_compare_figures_match_direct_computation(tmp_path, bits, group, asym):
    rng = np.random.default_rng()
    o_path, p_path, w_deq, _ = _models(tmp_path, rng, bits=bits, group=group, asym=asym)
    seed = int(rng.integers(2**31))
    report = compare(o_path, p_path, seed=seed, input_shapes={"x": (2, 9, 256)})
    assert isinstance(report, CompareReport)
    assert "Q/DQ twin" in report.via
    assert report.input_shapes == {"x": (2, 9, 256)}
    [out] = report.outputs
    assert out.name == "y" and tuple(out.shape) == (2, 9, 64) and out.finite

    # Recompute from the same generated inputs: original in float64, quantized from the dequantized weights.
    x = make_inputs(onnx.load(o_path), {"x": (2, 9, 256)}, seed)["x"]
    w = numpy_helper.to_array(onnx.load(o_path).graph.initializer[0]).astype(np.float64)
    o = x.astype(np.float64) @ w
    q = x.astype(np.float16).astype(np.float64) @ w_deq
    expected = compare_arrays("y", o, q)
    assert out.cosine == pytest.approx(expected.cosine, abs=2e-5)
    # The twin rounds its output to fp16 (|y| < 4 here: half an ulp is <= 1e-3), the float64 recomputation does not;
    # that bounds how far the max errors can differ, on top of 5 %.
    assert out.max_abs == pytest.approx(expected.max_abs, rel=0.05, abs=2e-3)
    assert out.max_rel == pytest.approx(expected.max_rel, rel=0.05, abs=2e-3 / np.abs(o).max())
    # Plausibility of the figures themselves: INT8 per channel is close, INT4 visibly less so.
    assert 0.0 < out.max_abs and 0.0 < out.max_rel < 1.0
    assert out.cosine > (0.9995 if bits == 8 else 0.98)


def test_passed_and_failed_lines(tmp_path):
    rng = np.random.default_rng()
    o_path, p_path, _, _ = _models(tmp_path, rng, bits=4, group=128)
    report = compare(o_path, p_path, seed=1)
    assert report.passed and report.min_cosine == 0.85 and "default for 4-bit" in report.threshold
    text = report.format()
    assert text.splitlines()[-1] == "PASSED"
    assert "max abs err" in text and "cosine" in text and " y " in text
    assert "cosine >= 0.85 (default for 4-bit weights" in text

    strict = compare(o_path, p_path, seed=1, min_cosine=0.99999999)
    assert not strict.passed
    assert strict.format().splitlines()[-1] == "FAILED"
    assert "below the required cosine" in strict.format() and "(--min-cosine)" in strict.format()

    loose = compare(o_path, p_path, seed=1, min_cosine=0.5)
    assert loose.passed and loose.format().splitlines()[-1] == "PASSED"
    d = loose.to_dict()
    assert d["passed"] is True and d["outputs"][0]["name"] == "y"


def test_identical_models_compare_exactly(tmp_path):
    rng = np.random.default_rng()
    o_path, _, _, _ = _models(tmp_path, rng)
    report = compare(o_path, o_path, seed=3, min_cosine=1.0 - 1e-12)
    [out] = report.outputs
    assert out.max_abs == 0.0 and out.cosine == pytest.approx(1.0, abs=1e-12)
    assert report.passed


def test_default_dynamic_dims_and_gather_indices(tmp_path):
    rng = np.random.default_rng()
    o_path, p_path, _, _ = _models(tmp_path, rng, ids=True)
    feeds = make_inputs(onnx.load(o_path), seed=5)
    ids = feeds["input_ids"]
    assert ids.shape == (2, 32) and ids.dtype == np.int64
    assert ids.min() >= 0 and ids.max() < 100  # rows of the Gather table
    assert len(np.unique(ids)) > 10
    report = compare(o_path, p_path, seed=5, input_shapes={"input_ids": (1, 12)})
    assert report.input_shapes == {"input_ids": (1, 12)} and report.outputs[0].shape == (1, 12, 64)


def test_inputs_are_fresh_per_seed(tmp_path):
    rng = np.random.default_rng()
    o_path, _, _, _ = _models(tmp_path, rng)
    model = onnx.load(o_path)
    a, b, c = (make_inputs(model, seed=s)["x"] for s in (1, 1, 2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.shape == (2, 32, 256) and a.dtype == np.float32 and np.abs(a).max() > 0


def test_user_errors(tmp_path):
    rng = np.random.default_rng()
    o_path, p_path, _, _ = _models(tmp_path, rng)
    with pytest.raises(UserError, match="no such file"):
        compare(tmp_path / "missing.onnx", p_path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \x00\xff" * 10)
    with pytest.raises(UserError, match="not a readable ONNX model"):
        compare(o_path, junk)
    with pytest.raises(UserError, match="does not have; its inputs are x"):
        compare(o_path, p_path, input_shapes={"tokens": (1, 4)})
    with pytest.raises(UserError, match=r"shape \[1, 4, 100\] does not match the model's \['batch', 'seq', 256\]"):
        compare(o_path, p_path, input_shapes={"x": (1, 4, 100)})
    with pytest.raises(UserError, match=r"--min-cosine 2.0 is not in \[-1, 1\]"):
        compare(o_path, p_path, min_cosine=2.0)


@pytest.mark.parametrize("tamper,match", [("group_size=0", "node proj: group_size 0 is not one of"),
                                          ("group_size=96", "node proj: group_size 96 is not one of"),
                                          ("scales[:3]", "3 scales, expected 2 x 64")])
def test_inconsistent_plugin_node_is_refused(tmp_path, tamper, match):
    """A tampered WeightOnlyLinear node (attributes or scales that disagree with the rest): one line, no traceback."""
    _, p_path, _, _ = _models(tmp_path, np.random.default_rng())
    model = onnx.load(p_path)
    node = next(n for n in model.graph.node if n.op_type == "WeightOnlyLinear")
    if tamper.startswith("group_size="):
        next(a for a in node.attribute if a.name == "group_size").i = int(tamper.split("=")[1])
    else:
        scales = next(t for t in model.graph.initializer if t.name == node.input[2])
        scales.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scales).reshape(-1)[:3], scales.name))
    with pytest.raises(UserError, match=match):
        plugin_to_qdq(model)


def test_plugin_model_with_old_opset_is_refused(tmp_path):
    rng = np.random.default_rng()
    _, p_path, _, _ = _models(tmp_path, rng)
    model = onnx.load(p_path)
    model.opset_import[0].version = 17
    with pytest.raises(UserError, match="needs opset >= 21"):
        plugin_to_qdq(model)


def test_non_finite_quantized_output_fails():
    o = np.ones((2, 3))
    q = o.copy()
    q[0, 1] = np.nan
    result = compare_arrays("y", o, q)
    assert not result.finite and not result.passes(-1.0)
    report = CompareReport("a", "b", "test", {}, 0, -1.0, outputs=[result])
    assert not report.passed and report.format().splitlines()[-1] == "FAILED" and "<- NaN/Inf" in report.format()


def test_empty_output_fails_even_at_the_lowest_threshold():
    result = compare_arrays("y", np.ones((0, 3)), np.ones((0, 3)))
    report = CompareReport("a", "b", "test", {}, 0, -1.0, outputs=[result])
    assert not report.passed and "<- empty output" in report.format() and "nan" not in report.format()
    assert not CompareReport("a", "b", "test", {}, 0, -1.0).passed  # no output at all


def test_models_with_external_data(tmp_path):
    """Weights stored as external data (how models over 2 GB are saved): same figures as the single-file models."""
    rng = np.random.default_rng()
    o_path, p_path, _, _ = _models(tmp_path, rng, bits=4, group=64, asym=True, bias=True)
    ext = tmp_path / "ext"
    ext.mkdir()
    for src in (o_path, p_path):
        onnx.save(onnx.load(src), ext / src.name, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=src.name + ".data", size_threshold=0)
        assert (ext / (src.name + ".data")).stat().st_size > 0
    a = compare(o_path, p_path, seed=9).outputs[0]
    b = compare(ext / o_path.name, ext / p_path.name, seed=9).outputs[0]
    assert a.cosine == b.cosine and a.max_abs == b.max_abs


def _bert_like(tmp_path, vocab=50):
    """input_ids -> Cast(int32) -> Gather(table[vocab]); attention_mask, token_type_ids, position_ids as inputs that
    feed the output, so that every generated input is checked by its effect too."""
    vi = helper.make_tensor_value_info
    ins = [vi(n, TensorProto.INT64, ["batch", "seq"]) for n in ("input_ids", "attention_mask", "token_type_ids",
                                                                 "position_ids")]
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
             helper.make_node("Gather", ["table", "ids32"], ["emb"], name="embed"),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
             helper.make_node("Mul", ["emb", "mask3"], ["y"])]
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((vocab, 8)).astype(np.float32), "table")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    graph = helper.make_graph(nodes, "g", ins, [vi("y", TensorProto.FLOAT, ["batch", "seq", 8])],
                              initializer=[table, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / "bert.onnx"
    onnx.save(model, path)
    return model, path


def test_generated_inputs_respect_what_integer_inputs_mean(tmp_path):
    model, _ = _bert_like(tmp_path, vocab=50)
    feeds = make_inputs(model, {"input_ids": (3, 11)}, seed=4)
    # The named dims batch / seq of input_ids hold for the other inputs too.
    assert {k: v.shape for k, v in feeds.items()} == {k: (3, 11) for k in feeds}
    ids = feeds["input_ids"]
    assert ids.min() >= 0 and ids.max() < 50 and len(np.unique(ids)) > 10  # rows of the table behind Cast + Gather
    assert (feeds["attention_mask"] == 1).all()
    assert (feeds["token_type_ids"] == 0).all()
    np.testing.assert_array_equal(feeds["position_ids"], np.broadcast_to(np.arange(11), (3, 11)))
    assert all(v.dtype == np.int64 for v in feeds.values())


@pytest.mark.parametrize("shape,match", [((-1, 8), "every dim must be >= 1"), ((100000000000, 8), "at most"),
                                         ((0, 8), "every dim must be >= 1")])
def test_generated_shapes_are_checked(tmp_path, shape, match):
    model, _ = _bert_like(tmp_path)
    with pytest.raises(UserError, match=match):
        make_inputs(model, {"input_ids": shape})


def test_negative_seed_is_refused(tmp_path):
    model, _ = _bert_like(tmp_path)
    with pytest.raises(UserError, match="seed must be >= 0"):
        make_inputs(model, seed=-1)


def test_real_inputs_from_npz_and_script(tmp_path):
    rng = np.random.default_rng()
    o_path, p_path, _, _ = _models(tmp_path, rng, bits=8, group=-1)
    x = rng.standard_normal((3, 2, 5, 256)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    a = compare(o_path, p_path, data=str(tmp_path / "x.npz"))
    assert a.samples == 3 and a.input_shapes == {"x": (2, 5, 256)} and a.outputs[0].size == 3 * 2 * 5 * 64
    assert "3 sample(s) from" in a.format() and a.passed and a.min_cosine == 0.999
    script = tmp_path / "load.py"
    script.write_text("import numpy as np\n"
                      f"def batches():\n    x = np.load({str(tmp_path / 'x.npz')!r})['x']\n"
                      "    return ({'x': x[i]} for i in range(len(x)))\n")
    b = compare(o_path, p_path, data_script=f"{script}:batches", samples=2)
    assert b.samples == 2
    # The first two samples of the same data: their figures are those of the npz run limited to 2.
    c = compare(o_path, p_path, data=str(tmp_path / "x.npz"), samples=2)
    assert b.outputs[0].cosine == c.outputs[0].cosine and b.outputs[0].max_abs == c.outputs[0].max_abs
    with pytest.raises(UserError, match="not both"):
        compare(o_path, p_path, data=str(tmp_path / "x.npz"), data_script=str(script))
    with pytest.raises(UserError, match="--samples counts samples of --data"):
        compare(o_path, p_path, samples=2)
    with pytest.raises(UserError, match="--input-shape shapes generated inputs"):
        compare(o_path, p_path, data=str(tmp_path / "x.npz"), input_shapes={"x": (1, 1, 256)})


def test_default_threshold_follows_the_weights(tmp_path):
    rng = np.random.default_rng()
    o_path, p8, _, _ = _models(tmp_path, rng, bits=8, group=-1)
    assert compare(o_path, p8).min_cosine == 0.999
    same = compare(o_path, o_path)
    assert same.min_cosine == 0.999 and "no quantized weight" in same.threshold and same.passed
    twin = plugin_to_qdq(onnx.load(p8))  # Q/DQ weights count as well
    from graph_passes.compare import quantized_bits

    assert quantized_bits(twin) == {8}


def test_a_failing_run_is_one_line_on_stderr(tmp_path, capfd):
    """ids past the embedding table: ONNX Runtime's own log of the failing node stays off stderr."""
    from graph_passes.__main__ import main

    _, path = _bert_like(tmp_path, vocab=50)
    ids = np.full((1, 2, 4), 70, np.int64)
    np.savez(tmp_path / "d.npz", input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=np.zeros_like(ids),
             position_ids=np.zeros_like(ids))
    capfd.readouterr()
    assert main(["compare", str(path), str(path), "--data", str(tmp_path / "d.npz")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "running the models failed" in err[0] and "embed" in err[0], err


def test_default_threshold_of_a_w8a8_model(rng):
    """A model with W8A8 nodes gets W8A8's default (its per-token activation rounding costs more than INT8 weights'
    rounding: 0.985 on the sample), unless its weights' bit width asks for less."""
    from graph_passes.compare import DEFAULT_MIN_COSINE, W8A8_MIN_COSINE, default_min_cosine

    weight_only, _ = models.run_pass(models.mlp(rng), bits=8, group_size=-1)
    w8a8, _ = models.run_pass(models.mlp(rng), bits=8, group_size=-1, act_mode="w8a8")
    assert default_min_cosine(weight_only)[0] == DEFAULT_MIN_COSINE[8]
    threshold, why = default_min_cosine(w8a8)
    assert threshold == W8A8_MIN_COSINE < DEFAULT_MIN_COSINE[8] and "W8A8" in why
    assert W8A8_MIN_COSINE > DEFAULT_MIN_COSINE[4]  # so an INT4 node in the same model keeps INT4's lower default
