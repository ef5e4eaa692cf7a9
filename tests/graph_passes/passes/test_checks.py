"""No silent wrong result: weights the op's dtype cannot hold, abnormal quantization errors and overridable weights
stay float with a reason and a hint; no numpy warning, no nan in the summary."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import woq_models as models
from graph_passes import QuantConfig
from graph_passes.passes.checks import MAX_REL_ERROR, WeightCheckError, check_error
from graph_passes.pipeline import quantize_model
from graph_passes.quantize import QuantizedWeight


def _two_layer(rng, scale_bad: float, path, outlier: float | None = None):
    """x -> good (normal weights) -> bad (weights times ``scale_bad``, optional single outlier) -> y; FP32."""
    w_bad = models.weight(rng, 128, 128) * np.float32(scale_bad)
    if outlier is not None:
        w_bad[5, 7] = outlier
    vi = helper.make_tensor_value_info
    model = models.make_model([helper.make_node("MatMul", ["x", "w_good"], ["h"], name="good"),
                               helper.make_node("MatMul", ["h", "w_bad"], ["y"], name="bad")],
                              [vi("x", TensorProto.FLOAT, ["B", 128])], [vi("y", TensorProto.FLOAT, ["B", 128])],
                              [numpy_helper.from_array(models.weight(rng, 128, 128), "w_good"),
                               numpy_helper.from_array(w_bad, "w_bad")], opset=21)
    onnx.save(model, path)
    return str(path)


def _quantize(tmp_path, model, **cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would fail the test
        report = quantize_model(model, str(tmp_path / "out.onnx"), QuantConfig(**cfg), force=True)
    text = report.format()
    assert "nan" not in text.lower()
    return report, text


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_tiny_weights_are_skipped_in_fp16_and_quantized_in_bf16(tmp_path, rng, fmt):
    model = _two_layer(rng, 1e-12, tmp_path / "tiny.onnx")
    report, text = _quantize(tmp_path, model, format=fmt, act_dtype="fp16")
    [skip] = report.skipped
    assert skip.node == "bad" and skip.reason == "weight too small for fp16"
    assert "--act-dtype bf16" in skip.detail and "underflow to zero" in skip.detail
    assert [r.node for r in report.rewritten] == ["good"]
    assert "weight too small for fp16: bad" in text
    report, _ = _quantize(tmp_path, model, format=fmt, act_dtype="bf16")  # bf16 has float32's exponent range
    assert not report.skipped and all(r.weight_rel_error < 0.2 for r in report.rewritten)


@pytest.mark.parametrize("act,outlier", [("fp16", 1e5), ("fp16", 1e6), ("fp16", 3e38), ("bf16", 3e38),
                                         ("bf16", 1e30)])
def test_huge_weights_are_skipped(tmp_path, rng, act, outlier):
    model = _two_layer(rng, 1.0, tmp_path / "huge.onnx", outlier=outlier)
    report, _ = _quantize(tmp_path, model, act_dtype=act)
    [skip] = report.skipped
    assert skip.node == "bad" and skip.reason == f"weight too large for {act}", skip
    assert ("--act-dtype bf16" if act == "fp16" else "--exclude") in skip.detail


def test_fp16_graph_weights_are_not_range_checked(tmp_path, rng):
    """An FP16 graph holds its weights in fp16 already: nothing to flush or overflow that the original does not."""
    report, _ = _quantize(tmp_path, str(_save(tmp_path, models.mlp(rng, dtype=np.float16))), group_size=64)
    assert not report.skipped and len(report.rewritten) == 2


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("bits", [8, 4])
def test_abnormal_quantization_error_is_refused(bits):
    u = np.zeros((64, 8), np.uint8)
    qw = QuantizedWeight(u=u, scales=np.ones((1, 8), np.float32), zeros=None, bits=bits, group_size=-1,
                         act_dtype="fp16", sq_error=(MAX_REL_ERROR[bits] * 1.01) ** 2, sq_norm=1.0)
    with pytest.raises(WeightCheckError, match="relative RMS error .* --exclude the node") as err:
        check_error(qw, "fp16", "node")
    assert err.value.reason == f"quantization error far above the normal for INT{bits}"
    assert ("--bits 8" in str(err.value)) == (bits == 4)
    qw.sq_error = (MAX_REL_ERROR[bits] * 0.99) ** 2
    check_error(qw, "fp16", "node")
    qw.sq_error = float("inf")
    with pytest.raises(WeightCheckError, match="overflows"):
        check_error(qw, "fp16", "node")


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_overridable_weight_stays_float_and_an_input(tmp_path, rng, fmt):
    model = models.mlp(rng, opset=21)
    w2 = next(t for t in model.graph.initializer if t.name == "w2")
    model.graph.input.insert(0, helper.make_tensor_value_info("w2", TensorProto.FLOAT, list(w2.dims)))
    path = _save(tmp_path, model)
    report, _ = _quantize(tmp_path, str(path), format=fmt, group_size=64)
    [skip] = report.skipped
    assert skip.node == "fc2" and skip.reason == "weight is an overridable graph input"
    assert "remove it from the graph inputs" in skip.detail  # how to quantize it all the same
    assert [r.node for r in report.rewritten] == ["fc1"]
    out = onnx.load(tmp_path / "out.onnx")
    assert [i.name for i in out.graph.input] == ["w2", "x"] and "w2" in {t.name for t in out.graph.initializer}
    # Overriding it still changes the output, as in the original.
    feeds = {"x": rng.standard_normal((2, 3, 128)).astype(np.float32)}
    runnable = out if fmt == "qdq" else __import__("graph_passes.compare", fromlist=["x"]).plugin_to_qdq(out)
    a = models.ort_run(runnable, feeds)[0]
    b = models.ort_run(runnable, {**feeds, "w2": np.zeros(w2.dims, np.float32)})[0]
    assert np.abs(a).max() > 0 and not np.abs(b).any()


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_initializers_listed_as_inputs_in_ir3_are_constants(tmp_path, rng, fmt):
    """IR version 3 requires every initializer to be a graph input; ONNX Runtime treats them as constants there (IR
    >= 4 only makes such an input overridable). So they are quantized, and the model's inputs are its real ones."""
    model = models.mlp(rng, opset=9)
    model.ir_version = 3
    for t in model.graph.initializer:
        model.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    onnx.checker.check_model(model)
    path = _save(tmp_path, model)
    report, _ = _quantize(tmp_path, str(path), format=fmt, group_size=64)
    assert sorted(r.node for r in report.rewritten) == ["fc1", "fc2"] and not report.skipped
    out = onnx.load(tmp_path / "out.onnx")
    onnx.checker.check_model(out, full_check=True)
    assert [i.name for i in out.graph.input] == ["x"]
    runnable = out if fmt == "qdq" else __import__("graph_passes.compare", fromlist=["x"]).plugin_to_qdq(out)
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    y, ref = models.ort_run(runnable, {"x": x})[0], models.ort_run(model, {"x": x})[0]
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 0.2  # two INT4 g64 layers
