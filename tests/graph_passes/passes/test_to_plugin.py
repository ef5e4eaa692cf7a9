"""Rewrite to WeightOnlyLinear: structure (Casts, sharing, attributes) and numerics vs float64 x @ dequant(W)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import models
from graph_passes import op
from graph_passes.quantize import quantize_rtn


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _woq_nodes(model):
    return [n for n in model.graph.node if n.op_type == op.OP_TYPE]


def test_fp32_graph_gets_casts_and_runs(rng):
    model = models.mlp(rng)
    out, report = models.run_pass(model, bits=4, group_size=64, asymmetric=True)
    assert _ops(out) == ["Cast", "WeightOnlyLinear", "Cast", "Relu", "Cast", "WeightOnlyLinear", "Cast"]
    assert [r.pattern for r in report.rewritten] == ["MatMul+Add", "MatMul"] and not report.skipped
    assert any(o.domain == op.DOMAIN and o.version == 1 for o in out.opset_import)
    n0 = _woq_nodes(out)[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n0.attribute}
    assert attrs["bits"] == 4 and attrs["group_size"] == 64 and attrs["in_features"] == 128
    assert attrs["out_features"] == 256 and attrs["has_zeros"] == 1 and attrs["has_bias"] == 1
    assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b"" and n0.domain == "trt_woq"
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    assert inits[n0.input[1]].dtype == np.int32 and inits[n0.input[1]].shape == (256 // 4, 128 // 2)
    assert all(inits[name].dtype == np.float16 for name in n0.input[2:])  # scales, zeros, bias in act dtype
    x = rng.standard_normal((2, 5, 128)).astype(np.float32)
    y = models.ref_run(out, {"x": x})[0]
    y0 = models.ort_run(model, {"x": x})[0]
    assert y.dtype == np.float32 and y.shape == y0.shape
    rel = np.linalg.norm(y - y0) / np.linalg.norm(y0)
    assert rel < 0.4, rel  # INT4 g64 on random weights with outlier rows: quantization error, not a bug


def test_fp16_graph_no_casts_cast_and_transpose_weights(rng):
    model = models.cast_transpose(rng)
    out, report = models.run_pass(model, bits=8, group_size=-1)
    assert _ops(out) == ["WeightOnlyLinear", "WeightOnlyLinear"] and len(report.rewritten) == 2
    x = rng.standard_normal((2, 3, 128)).astype(np.float16)
    y, z = models.ref_run(out, {"x": x})
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for got, w in ((y, inits["w32"].astype(np.float16)), (z, inits["wt"].T)):
        ref = x.astype(np.float64) @ quantize_rtn(w.astype(np.float32), 8, -1).dequantize()
        assert got.dtype == np.float16
        assert np.all(np.abs(got - ref) <= 2.0**-11 * np.abs(ref) + 1e-7)


def test_gemm_alpha_beta_folded(rng):
    model = models.gemm(rng, alpha=0.5, beta=2.0, trans_b=1)
    out, _ = models.run_pass(model, bits=8, group_size=-1, act_dtype="fp32")
    assert _ops(out) == ["WeightOnlyLinear"]
    x = rng.standard_normal((7, 128)).astype(np.float32)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w = quantize_rtn(inits["w"].T * np.float32(0.5), 8, -1, act_dtype="fp32").dequantize()
    ref = x.astype(np.float64) @ w + 2.0 * inits["c"].astype(np.float64)
    y = models.ref_run(out, {"x": x})[0]
    assert np.all(np.abs(y - ref) <= 2.0**-24 * np.abs(ref) + 1e-12)


def test_shared_weight_packed_once(rng):
    out, report = models.run_pass(models.shared(rng))
    nodes = _woq_nodes(out)
    assert len(nodes) == 2 and nodes[0].input[1] == nodes[1].input[1] and nodes[0].input[2] == nodes[1].input[2]
    packed = [t for t in out.graph.initializer if t.data_type == onnx.TensorProto.INT32]
    assert len(packed) == 1 and [r.shared for r in report.rewritten] == [False, True]


def test_nan_weight_skipped_others_rewritten(rng):
    out, report = models.run_pass(models.mixed(rng, nan=True), group_size=64)
    reasons = {s.node: s.reason for s in report.skipped}
    assert reasons["nan_node"] == "NaN/Inf in weight" and "w_nan" in report.skipped[-1].detail
    assert [r.node for r in report.rewritten] == ["good"]
    assert _ops(out).count("WeightOnlyLinear") == 1 and _ops(out).count("MatMul") == 3


@pytest.mark.parametrize("act", ["fp16", "bf16"])
def test_act_dtype_option_in_fp32_graph(rng, act):
    pytest.importorskip("ml_dtypes")
    out, report = models.run_pass(models.gemm(rng), act_dtype=act)
    assert report.rewritten[0].act_dtype == act and report.rewritten[0].casts
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    to = {"fp16": onnx.TensorProto.FLOAT16, "bf16": onnx.TensorProto.BFLOAT16}[act]
    assert onnx.helper.get_attribute_value(casts[0].attribute[0]) == to
    y = models.ref_run(out, {"x": rng.standard_normal((3, 128)).astype(np.float32)})[0]
    assert y.dtype == np.float32 and np.all(np.isfinite(y))
