"""The WeightOnlyLinear contract as code and its reference evaluator, on packed tensors, vs float64 x @ dequant(W)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graph_passes import QuantizationError, op
from graph_passes.quantize import act_numpy_dtype, quantize_rtn, to_act_storage
from graph_passes.layouts import interleaved_v1

ONNX_TYPE = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "fp32": TensorProto.FLOAT}


def _single_node_model(rng, act, bits, group_size, asym, bias, k=512, n=68):
    w = rng.standard_normal((k, n)).astype(np.float32) * 0.05
    qw = quantize_rtn(w, bits, group_size, asym, act)
    dt = act_numpy_dtype(act)
    tensors = {"packed": interleaved_v1.pack(qw.u, bits), "scales": to_act_storage(qw.scales, act)}
    if asym:
        tensors["zeros"] = to_act_storage(qw.zeros, act)
    if bias:
        tensors["bias"] = (rng.standard_normal(n) * 0.1).astype(dt)
    attrs = op.WoqAttributes(bits=bits, group_size=group_size, in_features=k, out_features=n,
                             has_zeros=int(asym), has_bias=int(bias))
    node = op.make_onnx_node(["x", *tensors], ["y"], attrs, name="woq")
    inits = [numpy_helper.from_array(v, name) for name, v in tensors.items()]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", ONNX_TYPE[act], ["B", "S", k])],
                              [helper.make_tensor_value_info("y", ONNX_TYPE[act], ["B", "S", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(op.DOMAIN, op.OPSET_VERSION)])
    x = rng.standard_normal((2, 3, k)).astype(dt)
    w_ref = qw.dequantize()
    ref = x.astype(np.float64) @ w_ref + (tensors["bias"].astype(np.float64) if bias else 0.0)
    return model, x, ref, x.astype(np.float64).__abs__() @ np.abs(w_ref)


@pytest.mark.parametrize("act", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("bits,group_size,asym,bias", [(4, 128, False, False), (4, 64, True, True),
                                                       (4, 256, True, False), (8, -1, False, True),
                                                       (8, 32, True, False)])
def test_reference_evaluator_vs_float64(rng, act, bits, group_size, asym, bias):
    if act == "bf16":
        pytest.importorskip("ml_dtypes")
    model, x, ref, mag = _single_node_model(rng, act, bits, group_size, asym, bias)
    y = op.reference_evaluator(model).run(None, {"x": x})[0]
    assert y.dtype == act_numpy_dtype(act) and y.shape == ref.shape
    # float64 math, one rounding to the output dtype: |y - ref| <= u |ref| (u = unit roundoff; bf16 2^-8), or half
    # the smallest subnormal where |ref| falls in the subnormal range (fp16: 2^-25).
    u = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24}[act]
    half_sub = {"fp16": 2.0**-25, "bf16": 2.0**-134, "fp32": 2.0**-150}[act]
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= u * np.abs(ref) + half_sub), float((err - u * np.abs(ref)).max())
    assert np.abs(ref).max() > 0 and np.all(mag > 0)


def test_contract_constants_and_positions():
    a = op.WoqAttributes(bits=4, group_size=128, in_features=256, out_features=64, has_zeros=1, has_bias=1)
    assert a.input_positions() == {"X": 0, "packed_weight": 1, "scales": 2, "zeros": 3, "bias": 4}
    assert op.WoqAttributes(8, -1, 256, 64, has_bias=1).input_positions()["bias"] == 3
    d = a.to_dict()
    assert d["plugin_version"] == "1" and d["plugin_namespace"] == "" and d["layout"] == 1
    assert set(op.INT_ATTRIBUTES) <= set(d)
    node = op.make_onnx_node(["x", "p", "s", "z", "b"], ["y"], a, name="n")
    assert node.domain == "trt_woq" and node.op_type == "WeightOnlyLinear"
    assert {at.name: helper.get_attribute_value(at) for at in node.attribute}["plugin_version"] == b"1"


@pytest.mark.parametrize("bad,match", [(dict(bits=3), "bits 3"), (dict(group_size=96), "group_size 96"),
                                       (dict(in_features=96, group_size=-1), "multiple of 64"),
                                       (dict(in_features=320, group_size=256), "not a multiple of group_size"),
                                       (dict(out_features=66), "multiple of 4")])
def test_attribute_validation_quotes_bad_value(bad, match):
    base = dict(bits=4, group_size=128, in_features=256, out_features=64)
    with pytest.raises((QuantizationError, ValueError), match=match):
        op.WoqAttributes(**{**base, **bad}).validate()


def test_input_count_must_match_flags(rng):
    a = op.WoqAttributes(bits=4, group_size=128, in_features=256, out_features=64, has_bias=1)
    with pytest.raises(QuantizationError, match="expected 4 inputs"):
        op.make_onnx_node(["x", "p", "s"], ["y"], a)


def test_evaluate_rejects_mismatched_dtypes(rng):
    model, x, _, _ = _single_node_model(rng, "fp16", 4, 128, False, False)
    with pytest.raises(Exception, match="scales must be"):
        op.reference_evaluator(model).run(None, {"x": x.astype(np.float32)})
    onnx.checker.check_model(model)


def test_op_run_class_for_new_ops(rng):
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    assert issubclass(op.WeightOnlyLinear, OpRun) and op.WeightOnlyLinear.op_domain == "trt_woq"
    model, x, ref, _ = _single_node_model(rng, "fp32", 8, 64, False, True)
    y = ReferenceEvaluator(model, new_ops=[op.WeightOnlyLinear]).run(None, {"x": x})[0]
    assert np.all(np.abs(y - ref) <= 2.0**-24 * np.abs(ref) + 2.0**-150)
