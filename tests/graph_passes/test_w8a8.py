"""W8A8 (activation mode ``w8a8``): the per-token activation quantizer, the op's integer-GEMM reference against the
fake-quantized float64 product, the CLI, and the ONNX Runtime float emulation against the reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import woq_models as models
from graph_passes import QuantizationError, op
from graph_passes.__main__ import main
from graph_passes.compare import plugin_to_qdq
from graph_passes.quantize import act_numpy_dtype, quantize_rtn, to_act_storage
from graph_passes.quantizers.activations import quantize_activations
from graph_passes.registry.act_modes import W8A8
from graph_passes.layouts import interleaved_v1


@pytest.mark.parametrize("asym", [False, True])
@pytest.mark.parametrize("group", [-1, 32, 128])
def test_activation_quantizer_exact_steps(rng, asym, group):
    k = 256
    x = (rng.standard_normal((5, 3, k)) * rng.uniform(0.1, 8, (5, 3, 1)) + (1.5 if asym else 0)).astype(np.float16)
    x[0, 0, :] = 0             # an all-zero row: scale 0, codes 0
    x[0, 1, :] = 0.75          # a constant row
    qa = quantize_activations(x, group, asym)
    b = k if group == -1 else group
    assert qa.codes.dtype == np.int8 and qa.scales.shape == (5, 3, k // b) == qa.offsets.shape
    xb = x.astype(np.float64).reshape(5, 3, k // b, b)
    if asym:
        lo, hi = xb.min(-1), xb.max(-1)
        # the float32 steps of the docstring, each correctly rounded
        assert np.array_equal(qa.scales, ((hi - lo).astype(np.float32) / np.float32(255)))
        assert qa.codes.min() >= -128 and qa.codes.max() <= 127
    else:
        assert np.array_equal(qa.scales, (np.abs(xb).max(-1).astype(np.float32) / np.float32(127)))
        assert not qa.offsets.any() and qa.codes.min() >= -127
    assert not qa.codes[0, 0].any() and qa.scales[0, 0].max() == 0
    # read back: every element within half a step (plus float32 rounding of the step) of x
    err = np.abs(qa.dequantize() - x.astype(np.float64)).reshape(5, 3, k // b, b)
    assert (err <= qa.scales[..., None] * (0.5 + 1e-5) + 1e-30).all()
    assert np.array_equal(qa.row_sums, qa.codes.astype(np.int64).reshape(5, 3, k // b, b).sum(-1))
    with pytest.raises(QuantizationError, match="NaN/Inf"):
        quantize_activations(np.full((1, k), np.inf, np.float32), group, asym)


def _w8a8_tensors(rng, act, group, asym, k=192, n=70, bias=True):
    w = models.weight(rng, k, n)
    qw = quantize_rtn(w, 8, group, False, act)
    attrs = op.WoqAttributes(bits=8, group_size=group, in_features=k, out_features=n, has_bias=int(bias),
                             act_mode=W8A8.c_enum, act_asymmetric=int(asym))
    dt = act_numpy_dtype(act)
    tensors = {"packed": interleaved_v1.pack(qw.u, 8), "scales": to_act_storage(qw.scales, act)}
    if bias:
        tensors["bias"] = (rng.standard_normal(n) * 0.1).astype(dt)
    if asym:
        tensors["weight_sums"] = op.weight_sums_of(qw.u, 8, group)
    return attrs, tensors, qw


@pytest.mark.parametrize("act", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("group,asym", [(-1, False), (-1, True), (64, False), (32, True)])
def test_evaluate_formula_matches_fake_quant(rng, act, group, asym):
    """The op's reference (integer GEMM per group + offset correction from weight_sums) equals the registry's
    fake quantization times the dequantized weight, in float64 (same function, two derivations)."""
    if act == "bf16":
        pytest.importorskip("ml_dtypes")
    attrs, t, qw = _w8a8_tensors(rng, act, group, asym, bias=False)
    x = (rng.standard_normal((3, 7, attrs.in_features)) + (0.8 if asym else 0)).astype(act_numpy_dtype(act))
    formula = op.w8a8_evaluate(x, t["packed"], t["scales"], t.get("weight_sums"), attrs)
    fake = W8A8.reference(x, group, asym) @ interleaved_v1.dequantize_reference(
        t["packed"], t["scales"], None, attrs.in_features, attrs.out_features, 8, group)
    assert np.allclose(formula, fake, rtol=1e-12, atol=1e-12 * np.abs(fake).max())
    # and it is close to the float product: INT8 activations and weights lose about 1 %
    exact = x.astype(np.float64) @ qw.dequantize()
    assert np.linalg.norm(formula - exact) < 0.05 * np.linalg.norm(exact)


def test_contract_validation():
    base = dict(bits=8, group_size=-1, in_features=128, out_features=64, act_mode=1)
    op.WoqAttributes(**base).validate()
    for change, msg in (({"bits": 4}, "takes 8-bit weights"), ({"has_zeros": 1}, "symmetric weights"),
                        ({"act_mode": 7}, "act_mode 7 is not one of"),
                        ({"act_mode": 0, "act_asymmetric": 1}, "act_asymmetric must be 0")):
        with pytest.raises(QuantizationError, match=msg):
            op.WoqAttributes(**{**base, **change}).validate()
    # a node written without the W8A8 attributes is weight-only
    d = {a: 1 for a in op.INT_ATTRIBUTES} | {"bits": 8, "group_size": -1, "in_features": 128, "out_features": 64}
    assert op.WoqAttributes.from_dict(d).act_mode == 0


@pytest.mark.parametrize("group,asym", [(-1, False), (64, True)])
def test_cli_w8a8_twin_matches_reference(rng, tmp_path, capsys, group, asym):
    """quantize --act-mode w8a8 writes act_mode / weight_sums; the ORT float emulation (compare's twin) agrees with
    the reference evaluator to float32 rounding, and both stay close to the float model."""
    src, dst = tmp_path / "mlp.onnx", tmp_path / "mlp.w8a8.onnx"
    onnx.save(models.mlp(rng, k=256, hidden=512), src)
    argv = ["quantize", str(src), "-o", str(dst), "--bits", "8", "--group-size", str(group), "--act-mode", "w8a8"]
    assert main(argv + (["--act-asymmetric"] if asym else [])) == 0
    capsys.readouterr()
    q = onnx.load(str(dst))
    nodes = [n for n in q.graph.node if n.op_type == op.OP_TYPE]
    assert len(nodes) == 2
    for n in nodes:
        attrs = op.WoqAttributes.from_dict({a.name: onnx.helper.get_attribute_value(a) for a in n.attribute})
        assert attrs.act_mode == W8A8.c_enum and attrs.act_asymmetric == int(asym)
        assert len(n.input) == attrs.num_inputs
    x = (rng.standard_normal((2, 9, 256)) + (0.5 if asym else 0)).astype(np.float32)
    ref = models.ref_run(q, {"x": x})[0].astype(np.float64)
    twin = models.ort_run(plugin_to_qdq(q), {"x": x})[0].astype(np.float64)
    orig = models.ort_run(onnx.load(str(src)), {"x": x})[0].astype(np.float64)
    # both end in the fp16 rounding of the op's output; an activation code can flip where float32 rounding of
    # the first layer's output moves an input of the second across a rounding boundary
    assert np.linalg.norm(twin - ref) < 2e-3 * np.linalg.norm(ref)
    cos = float(np.dot(ref.ravel(), orig.ravel()) / (np.linalg.norm(ref) * np.linalg.norm(orig)))
    assert cos > 0.999


@pytest.mark.parametrize("extra,msg", [(["--bits", "4"], "takes --bits 8"),
                                       (["--bits", "8", "--asymmetric"], "drop --asymmetric"),
                                       (["--bits", "8", "--format", "qdq"], "use --format plugin")])
def test_cli_w8a8_refusals(rng, tmp_path, capsys, extra, msg):
    src = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(rng), src)
    assert main(["quantize", str(src), "--act-mode", "w8a8", *extra]) == 2
    assert msg in capsys.readouterr().err
    assert main(["quantize", str(src), "--bits", "8", "--act-asymmetric"]) == 2
    assert "--act-asymmetric needs" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx"]
