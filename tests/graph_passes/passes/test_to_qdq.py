"""Rewrite to Q/DQ (DequantizeLinear opset 21 + MatMul): checker, ONNX Runtime, structure, and agreement with the
plugin format evaluated by the reference evaluator (the two formats must hold identical weights)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

import woq_models as models
from graph_passes import op, weight_dequantize

U32, U16 = 2.0**-24, 2.0**-11


def _plugin_layers(model):
    """(W float64 [K, N], bias float64 or 0) of each WeightOnlyLinear node, from the packed tensors."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    layers = []
    for node in model.graph.node:
        if node.op_type != op.OP_TYPE:
            continue
        a = op.WoqAttributes.from_dict({x.name: onnx.helper.get_attribute_value(x) for x in node.attribute})
        pos = a.input_positions()
        zeros = inits[node.input[pos["zeros"]]] if a.has_zeros else None
        w = weight_dequantize(inits[node.input[1]], inits[node.input[2]], zeros, algo=f"weight_only_int{a.bits}",
                              group_size=a.group_size)
        bias = inits[node.input[pos["bias"]]].astype(np.float64) if a.has_bias else 0.0
        layers.append((w, bias))
    return layers


def _twins(model, **cfg):
    plugin, _ = models.run_pass(model, format="plugin", **cfg)
    qdq, report = models.run_pass(model, format="qdq", **cfg)
    onnx.checker.check_model(qdq, full_check=True)
    return plugin, qdq, report


@pytest.mark.parametrize("bits,group_size,asym", [(4, 128, False), (4, 32, True), (8, -1, False), (8, 64, True),
                                                  (4, -1, True)])
def test_single_layer_twins_agree_to_fp32_rounding(rng, bits, group_size, asym):
    # act_dtype fp32 (reference only): no Casts, so both formats compute X @ W + b on identical float32 values.
    model = models.gemm(rng, k=256, n=128, alpha=0.75, beta=1.5, trans_b=1)
    plugin, qdq, report = _twins(model, bits=bits, group_size=group_size, asymmetric=asym, act_dtype="fp32")
    assert [n.op_type for n in qdq.graph.node] == ["DequantizeLinear", "MatMul", "Add"]
    x = rng.standard_normal((9, 256)).astype(np.float32)
    yp = models.ref_run(plugin, {"x": x})[0]
    yq = models.ort_run(qdq, {"x": x})[0]
    (w, b), = _plugin_layers(plugin)
    # Float32 evaluation of a K-term dot product plus bias: |error| <= (K + 2) u (|x| @ |W| + |b|) (Higham's
    # gamma_K bound, u = 2^-24); the float64 reference adds one rounding u |y|.
    bound = (256 + 3) * U32 * (np.abs(x.astype(np.float64)) @ np.abs(w) + np.abs(b))
    assert np.all(np.abs(yp.astype(np.float64) - yq) <= bound)


def test_mlp_twins_agree_to_fp32_rounding(rng):
    model = models.mlp(rng, k=128, hidden=256)
    plugin, qdq, _ = _twins(model, bits=4, group_size=64, asymmetric=True, act_dtype="fp32")
    x = rng.standard_normal((2, 7, 128)).astype(np.float32)
    yp = models.ref_run(plugin, {"x": x})[0]
    yq = models.ort_run(qdq, {"x": x})[0]
    (w1, b1), (w2, _) = _plugin_layers(plugin)
    # Errors of layer 1 pass through ReLU (1-Lipschitz) and |W2|: first-order bound (K1 + K2 + 4) u |x||W1||W2|.
    mag = (np.abs(x.astype(np.float64)) @ np.abs(w1) + np.abs(b1)) @ np.abs(w2)
    assert np.all(np.abs(yp.astype(np.float64) - yq) <= (128 + 256 + 4) * U32 * mag)


def test_fp16_graph_twins(rng):
    model = models.cast_transpose(rng)
    plugin, qdq, _ = _twins(model, bits=4, group_size=128)
    x = rng.standard_normal((2, 3, 128)).astype(np.float16)
    outs_p = models.ref_run(plugin, {"x": x})
    outs_q = models.ort_run(qdq, {"x": x})
    for yp, yq, (w, _) in zip(outs_p, outs_q, _plugin_layers(plugin), strict=True):
        assert yp.dtype == yq.dtype == np.float16
        # ORT may accumulate in fp16: (K + 2) u16 (|x| @ |W|) bounds both roundings.
        bound = (128 + 2) * U16 * (np.abs(x.astype(np.float64)) @ np.abs(w))
        assert np.all(np.abs(yp.astype(np.float64) - yq.astype(np.float64)) <= bound)


def test_fp32_graph_with_fp16_plugin_vs_qdq(rng):
    # Default: the plugin format computes in fp16 (Casts), the Q/DQ twin in fp32 with the same (fp16-exact) scales.
    model = models.gemm(rng, k=128, n=256)
    plugin, qdq, _ = _twins(model, bits=8, group_size=128)
    x = rng.standard_normal((5, 128)).astype(np.float32)
    yp = models.ref_run(plugin, {"x": x})[0]
    yq = models.ort_run(qdq, {"x": x})[0]
    (w, b), = _plugin_layers(plugin)
    # Rounding x to fp16 (u16 |x||W|), the bias (u16 |b|) and y (u16 |y|), plus fp32 accumulation in ORT.
    mag = np.abs(x.astype(np.float64)) @ np.abs(w) + np.abs(b)
    assert np.all(np.abs(yp.astype(np.float64) - yq) <= 2 * U16 * mag + np.abs(yq) * U16 + (128 + 2) * U32 * mag)


@pytest.mark.parametrize("bits,group_size,asym,dtype,zp", [(4, 128, False, TensorProto.INT4, None),
                                                           (4, 64, True, TensorProto.UINT4, TensorProto.UINT4),
                                                           (8, -1, False, TensorProto.INT8, None),
                                                           (8, 32, True, TensorProto.UINT8, TensorProto.UINT8)])
def test_qdq_structure(rng, bits, group_size, asym, dtype, zp):
    model = models.mlp(rng)  # opset 17: converted to 21
    qdq, report = models.run_pass(model, format="qdq", bits=bits, group_size=group_size, asymmetric=asym)
    onnx.checker.check_model(qdq, full_check=True)
    assert "converted the model from opset 17 to 21" in report.notes
    assert next(o.version for o in qdq.opset_import if o.domain in ("", "ai.onnx")) >= 21
    inits = {t.name: t for t in qdq.graph.initializer}
    dqs = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dqs) == 2 and len(report.rewritten) == 2
    for dq in dqs:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in dq.attribute}
        assert inits[dq.input[0]].data_type == dtype
        if group_size == -1:
            assert attrs["axis"] == 1 and len(inits[dq.input[1]].dims) == 1
        else:
            assert attrs["axis"] == 0 and attrs["block_size"] == group_size
        assert (len(dq.input) == 3) == asym and (not asym or inits[dq.input[2]].data_type == zp)
    x = rng.standard_normal((1, 4, 128)).astype(np.float32)
    y = models.ort_run(qdq, {"x": x})[0]
    y0 = models.ort_run(model, {"x": x})[0]
    # Sanity only (the exact checks are the twin tests): RTN error of a 2-layer random MLP, INT4 ~10-25%.
    assert np.linalg.norm(y - y0) / np.linalg.norm(y0) < (0.05 if bits == 8 else 0.4)


def test_qdq_shared_weight_one_dq(rng):
    qdq, report = models.run_pass(models.shared(rng), format="qdq")
    dqs = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear"]
    mms = [n for n in qdq.graph.node if n.op_type == "MatMul"]
    assert len(dqs) == 1 and len(mms) == 2 and all(m.input[1] == dqs[0].output[0] for m in mms)
