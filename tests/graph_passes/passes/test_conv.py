"""Conv passes: the default policy and what stays float, geometry (auto_pad, strides, dilations), bias folding,
the plugin model (float64 reference) against its Q/DQ twin and the --format qdq model (ONNX Runtime)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import woq_models as models
from graph_passes.compare import plugin_to_qdq
from graph_passes import op_conv
from graph_passes.op_conv import ConvAttributes


def _woq(model):
    return [n for n in model.graph.node if n.domain == "trt_woq"]


def _attrs(node):
    return ConvAttributes.from_dict({a.name: helper.get_attribute_value(a) for a in node.attribute})


def _skip_reason(model, **cfg):
    out, report = models.run_pass(model, **{"bits": 4, "group_size": -1, **cfg})
    return [s.reason for s in report.skipped], out, report


def test_policy_and_geometry(rng):
    stem = models.conv(rng, ic=3, oc=32)
    reasons, _, _ = _skip_reason(stem)
    assert len(reasons) == 1 and "stem stays float" in reasons[0]
    reasons, _, _ = _skip_reason(models.conv(rng, ic=64, oc=64, group=64))
    assert reasons == ["grouped / depthwise conv stays float (group != 1)"]
    reasons, _, _ = _skip_reason(models.conv(rng, ic=64, oc=8))
    assert len(reasons) == 1 and "fewer than 16 output channels" in reasons[0]
    dfl = np.tile(np.arange(64, dtype=np.float32).reshape(1, 64, 1, 1), (16, 1, 1, 1))
    reasons, _, _ = _skip_reason(models.conv(rng, ic=64, oc=16, kernel=(1, 1), pads=(0, 0, 0, 0), w=dfl))
    assert len(reasons) == 1 and "fixed integer weights" in reasons[0]
    # --include naming the node overrides the policy (not the layout)
    reasons, out, _ = _skip_reason(models.conv(rng, ic=64, oc=8), include=("conv",))
    assert reasons == [] and len(_woq(out)) == 1
    reasons, _, _ = _skip_reason(models.conv(rng, ic=64, oc=32), exclude=("conv",))
    assert reasons == ["excluded by --exclude conv"]
    # auto_pad SAME_UPPER with stride 2 on a static 9 x 11 input: pads resolved from the input size
    _, out, report = _skip_reason(models.conv(rng, strides=(2, 2), auto_pad="SAME_UPPER"))
    a = _attrs(_woq(out)[0])
    assert a.pads == (1, 1, 1, 1) and a.strides == (2, 2) and a.output_hw(9, 11) == (5, 6)
    _, out, _ = _skip_reason(models.conv(rng, kernel=(3, 3), dilations=(2, 2), auto_pad="SAME_LOWER", hw=(8, 8)))
    assert _attrs(_woq(out)[0]).pads == (2, 2, 2, 2)
    # Conv bias + a following Add of [1, OC, 1, 1] fold into one bias
    _, out, report = _skip_reason(models.conv(rng, add=True))
    assert report.rewritten[0].pattern == "Conv+Add" and _attrs(_woq(out)[0]).has_bias == 1
    assert [n.op_type for n in out.graph.node] == ["Cast", "WeightOnlyConv", "Cast"]


def test_fp6_convs_stay_float(rng):
    model = models.conv(rng, ic=64, oc=32)
    reasons, out, _ = _skip_reason(model, bits=6)
    assert len(reasons) == 1 and "no conv kernel serves fp6" in reasons[0] and not _woq(out)
    reasons, out, _ = _skip_reason(model, bits=8)
    assert reasons == [] and len(_woq(out)) == 1


def _cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


CASES = {  # name: (conv kwargs, quant kwargs)
    "3x3_pad1_silu_int4_g64": (dict(act="silu", add=True), dict(bits=4, group_size=64)),
    "3x3_s2_int8_asym_g32": (dict(strides=(2, 2), pads=(0, 1, 1, 0)), dict(bits=8, group_size=32,
                                                                          asymmetric=True)),
    "3x3_dil2_relu6_int4_g128": (dict(ic=128, dilations=(2, 2), pads=(2, 2, 2, 2), act="relu6"),
                                 dict(bits=4, group_size=128)),
    "1x1_int8_per_channel_fp16": (dict(kernel=(1, 1), pads=(0, 0, 0, 0), dtype=np.float16, oc=48),
                                  dict(bits=8, group_size=-1)),
    "7x7_s2_gelu_int4_g128": (dict(ic=128, kernel=(7, 7), strides=(2, 2), pads=(3, 3, 3, 3), hw=(13, 15), oc=20,
                                   act="gelu_erf_div"), dict(bits=4, group_size=128)),
    # 4 input channels: no whole 16-byte vector per tap, so K order (c, i, j)
    "4x4_ic4_int8_g32": (dict(ic=4, kernel=(4, 4), pads=(1, 1, 2, 2)), dict(bits=8, group_size=32)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plugin_and_qdq_twins_agree(rng, case):
    conv_kw, q_kw = CASES[case]
    model = models.conv(rng, **conv_kw)
    out, report = models.run_pass(model, **q_kw)
    assert len(report.rewritten) == 1 and not report.skipped
    assert [n.op_type for n in _woq(out)] == ["WeightOnlyConv"]
    ijc = conv_kw.get("ic", 64) % 8 == 0
    assert _attrs(_woq(out)[0]).k_order == (op_conv.K_ORDER_IJC if ijc else op_conv.K_ORDER_CIJ)
    dtype = conv_kw.get("dtype", np.float32)
    hw = conv_kw.get("hw", (9, 11))
    x = rng.standard_normal((2, conv_kw.get("ic", 64), *hw)).astype(dtype)
    y_ref = models.ref_run(out, {"x": x})[0]
    y_twin = models.ort_run(plugin_to_qdq(out), {"x": x})[0]
    y_orig = models.ort_run(model, {"x": x})[0]
    assert y_ref.shape == y_orig.shape == y_twin.shape
    assert np.linalg.norm(y_twin - y_ref) <= 4e-3 * np.linalg.norm(y_ref)  # fp16 rounding in ORT's ops
    qdq, _ = models.run_pass(model, format="qdq", **q_kw)
    head = ["DequantizeLinear", "Reshape"] + (["Transpose"] if ijc else []) + ["Conv"]
    assert [n.op_type for n in qdq.graph.node][:len(head)] == head
    y_qdq = models.ort_run(qdq, {"x": x})[0]
    # The Q/DQ format holds the same codes and scales (rounded to fp16) but computes in the graph's dtype.
    assert _cosine(y_qdq, y_ref) > 0.9995
    assert _cosine(y_ref, y_orig) > (0.999 if q_kw["bits"] == 8 else 0.99)
    if conv_kw.get("act"):
        assert report.rewritten[0].activation != "none"


def test_inspect_lists_convs(rng, tmp_path):
    from graph_passes import QuantConfig
    from graph_passes.pipeline import inspect_model

    path = tmp_path / "c.onnx"
    path.write_bytes(models.conv(rng, ic=3, oc=32).SerializeToString())
    report = inspect_model(str(path), QuantConfig())
    assert not report.rewritten and "stem stays float" in report.skipped[0].reason
    model = models.conv(rng)
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(1, np.float32), "unused"))
    path.write_bytes(model.SerializeToString())
    report = inspect_model(str(path), QuantConfig(group_size=64))
    assert [r.pattern for r in report.rewritten] == ["Conv"] and report.rewritten[0].k == 576


@pytest.mark.parametrize("geometry", [dict(kernel=(0, 3), w=np.zeros((32, 64, 0, 3), np.float32)),
                                      dict(strides=(0, 1)), dict(dilations=(1, 0)),
                                      dict(pads=(-1, 0, 0, 0))], ids=["empty_weight", "stride_0", "dilation_0",
                                                                      "negative_pad"])
def test_malformed_conv_is_skipped(rng, geometry):
    """A conv the op cannot express is left float with its reason; the model's other convs are still rewritten."""
    bad = models.conv(rng, name="bad", **geometry)
    good = models.conv(rng, name="good")
    for t in good.graph.initializer:
        t.name = "good_" + t.name
    for n in good.graph.node:
        n.input[:] = ["good_" + i if i != "x" else i for i in n.input]
        n.output[:] = ["good_" + o for o in n.output]
    graph = helper.make_graph(list(bad.graph.node) + list(good.graph.node), "two", list(bad.graph.input),
                              list(bad.graph.output) + [helper.make_tensor_value_info("good_y", 1, None)],
                              list(bad.graph.initializer) + list(good.graph.initializer))
    model = helper.make_model(graph, opset_imports=bad.opset_import)
    model.ir_version = bad.ir_version
    for fmt in ("plugin", "qdq"):
        reasons, out, report = _skip_reason(model, format=fmt)
        assert [r.node for r in report.rewritten] == ["good"]
        assert [s.node for s in report.skipped] == ["bad"] and reasons == ["conv geometry the op cannot take"]
