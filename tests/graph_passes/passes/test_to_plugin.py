"""Rewrite to WeightOnlyLinear: structure (Casts, sharing, attributes) and numerics vs float64 x @ dequant(W)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import woq_models as models
from graph_passes import op
from graph_passes.quantize import quantize_rtn


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _woq_nodes(model):
    return [n for n in model.graph.node if n.op_type == op.OP_TYPE]


def test_fp32_graph_gets_casts_and_runs(rng):
    model = models.mlp(rng)
    out, report = models.run_pass(model, bits=4, group_size=64, asymmetric=True)
    # The Relu after fc1 is fused into its epilogue (activation 1 = relu), across the Cast back to float32.
    assert _ops(out) == ["Cast", "WeightOnlyLinear", "Cast", "Cast", "WeightOnlyLinear", "Cast"]
    assert [r.pattern for r in report.rewritten] == ["MatMul+Add", "MatMul"] and not report.skipped
    assert [r.activation for r in report.rewritten] == ["relu", "none"]
    assert any(o.domain == op.DOMAIN and o.version == 1 for o in out.opset_import)
    n0 = _woq_nodes(out)[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n0.attribute}
    assert attrs["bits"] == 4 and attrs["group_size"] == 64 and attrs["in_features"] == 128
    assert attrs["out_features"] == 256 and attrs["has_zeros"] == 1 and attrs["has_bias"] == 1
    assert attrs["activation"] == 1 and "clip_min" not in attrs
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


def test_projections_share_one_input_cast(rng):
    from onnx import TensorProto, helper

    inits = [numpy_helper.from_array(models.weight(rng, 128, 64), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"proj{i}") for i in range(3)]
    vi = helper.make_tensor_value_info
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", "S", 128])],
                              [vi(f"y{i}", TensorProto.FLOAT, ["B", "S", 64]) for i in range(3)], inits)
    out, _ = models.run_pass(model)
    assert _ops(out).count("Cast") == 1 + 3 and _ops(out).count("WeightOnlyLinear") == 3
    x = rng.standard_normal((2, 3, 128)).astype(np.float32)
    for y, w in zip(models.ref_run(out, {"x": x}), (numpy_helper.to_array(t) for t in inits), strict=True):
        ref = x.astype(np.float16).astype(np.float64) @ quantize_rtn(w, 4, 128).dequantize()
        assert np.all(np.abs(y - ref) <= 2.0**-11 * np.abs(ref) + 2.0**-25)


def test_constant_node_weight_and_bias_first_add(rng):
    from onnx import TensorProto, helper

    w = models.weight(rng, 128, 64)
    b = (rng.standard_normal(64) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Constant", [], ["w"], name="const_w", value=numpy_helper.from_array(w, "wv")),
             helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["b", "h"], ["y"], name="bias_first")]
    vi = helper.make_tensor_value_info
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128])], [vi("y", TensorProto.FLOAT, ["B", 64])],
                              [numpy_helper.from_array(b.reshape(1, 64), "b")])
    out, report = models.run_pass(model, act_dtype="fp32", bits=8, group_size=64)
    assert _ops(out) == ["WeightOnlyLinear"] and report.rewritten[0].pattern == "MatMul+Add"
    x = rng.standard_normal((4, 128)).astype(np.float32)
    ref = x.astype(np.float64) @ quantize_rtn(w, 8, 64, act_dtype="fp32").dequantize() + b
    assert np.all(np.abs(models.ref_run(out, {"x": x})[0] - ref) <= 2.0**-24 * np.abs(ref) + 1e-30)


def test_matmul_output_with_two_consumers_keeps_add(rng):
    from onnx import TensorProto, helper

    inits = [numpy_helper.from_array(models.weight(rng, 128, 64), "w"),
             numpy_helper.from_array(np.full(64, 0.5, np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["y"], name="add"),
             helper.make_node("Relu", ["h"], ["z"], name="relu")]
    vi = helper.make_tensor_value_info
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128])],
                              [vi("y", TensorProto.FLOAT, ["B", 64]), vi("z", TensorProto.FLOAT, ["B", 64])], inits)
    out, report = models.run_pass(model)
    assert report.rewritten[0].pattern == "MatMul" and "Add" in _ops(out) and "Relu" in _ops(out)


def test_bf16_graph(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from onnx import TensorProto, helper

    w = models.weight(rng, 256, 64).astype(ml_dtypes.bfloat16)
    vi = helper.make_tensor_value_info
    model = models.make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                              [vi("x", TensorProto.BFLOAT16, ["B", 256])], [vi("y", TensorProto.BFLOAT16, ["B", 64])],
                              [numpy_helper.from_array(w, "w")])
    out, report = models.run_pass(model, group_size=64, asymmetric=True)
    assert _ops(out) == ["WeightOnlyLinear"] and report.rewritten[0].act_dtype == "bf16"
    x = rng.standard_normal((3, 256)).astype(ml_dtypes.bfloat16)
    y = models.ref_run(out, {"x": x})[0]
    ref = x.astype(np.float64) @ quantize_rtn(w.astype(np.float32), 4, 64, True, "bf16").dequantize()
    assert y.dtype == ml_dtypes.bfloat16
    assert np.all(np.abs(y.astype(np.float64) - ref) <= 2.0**-8 * np.abs(ref) + 1e-30)



def test_bf16_graph_with_declared_intermediate_and_relu(rng):
    """Exporters declare intermediate tensors (value_info); onnx-graphsurgeon keeps a bf16 one's dtype as the ONNX
    enum (numpy has no bf16), which the epilogue fusion must read as a dtype too."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from onnx import TensorProto, helper

    w = models.weight(rng, 128, 64).astype(ml_dtypes.bfloat16)
    vi = helper.make_tensor_value_info
    model = models.make_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                               helper.make_node("Relu", ["h"], ["y"], name="relu")],
                              [vi("x", TensorProto.BFLOAT16, ["B", 128])], [vi("y", TensorProto.BFLOAT16, ["B", 64])],
                              [numpy_helper.from_array(w, "w")], opset=21)
    model.graph.value_info.append(vi("h", TensorProto.BFLOAT16, ["B", 64]))
    out, report = models.run_pass(model, bits=8, group_size=-1)
    assert _ops(out) == ["WeightOnlyLinear"] and report.rewritten[0].activation == "relu"
    x = rng.standard_normal((3, 128)).astype(ml_dtypes.bfloat16)
    y = models.ref_run(out, {"x": x})[0].astype(np.float64)
    ref = np.maximum(x.astype(np.float64) @ quantize_rtn(w.astype(np.float32), 8, -1, False, "bf16").dequantize(), 0)
    assert np.all(np.abs(y - ref) <= 2.0**-8 * np.abs(ref) + 1e-30)

def test_progress_bar_on_stderr(rng, capsys):
    models.run_pass(models.mlp(rng), progress=True)
    err = capsys.readouterr().err
    assert "quantizing INT4 [" in err and "2/2" in err


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_rewritten_nodes_keep_their_names(rng, fmt):
    """The op that replaces a node takes its name, so a user finds the layer of a report or an engine under the name
    the exporter gave it; an unnamed node's op is named after the op type (no "_1" suffixes)."""
    model = models.mlp(rng)
    model.graph.node[-1].name = ""
    conv = models.conv(rng, name="")
    out, _ = models.run_pass(model, bits=8, group_size=-1, format=fmt)
    names = [n.name for n in out.graph.node if n.op_type in ("MatMul", op.OP_TYPE)]
    assert names == ["fc1", op.OP_TYPE if fmt == "plugin" else ""]
    out, _ = models.run_pass(conv, bits=8, group_size=-1, format=fmt)
    assert [n.name for n in out.graph.node if n.op_type in ("Conv", "WeightOnlyConv")] == (
        ["WeightOnlyConv"] if fmt == "plugin" else [""])
