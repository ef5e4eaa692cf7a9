"""Quantizer: error bounds vs float64, the scale search vs max-abs, act-dtype rounding, API round trip, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from graph_passes import QuantizationError, weight_dequantize, weight_only_linear, weight_quantize
from graph_passes.quantize import act_numpy_dtype, quantize_rtn, round_bf16, round_to_act

CASES = [(bits, g, asym) for bits in (8, 4) for g in (-1, 32, 64, 128, 256) for asym in (False, True)]


def _weights(rng, k, n):
    w = rng.standard_normal((k, n)) * 0.02
    w[rng.integers(0, k, 3)] *= 8.0  # outlier input channels
    return w.astype(np.float32)


def _group_err(w, deq, g):
    k, n = w.shape
    g = k if g == -1 else g
    return np.square(deq - w.astype(np.float64)).reshape(k // g, g, n).sum(axis=1)


@pytest.mark.parametrize("bits,group_size,asym", CASES)
def test_error_bound_and_search_beats_maxabs(rng, bits, group_size, asym):
    k, n = 256, 96
    w = _weights(rng, k, n)
    qw = quantize_rtn(w, bits, group_size, asym, "fp16")
    base = quantize_rtn(w, bits, group_size, asym, "fp16", clip_ratios=(1.0,))
    deq, deq_base = qw.dequantize(), base.dequantize()
    # Per group: the search never does worse than max-abs / min-max (1.0 is one of its candidates).
    err, err_base = _group_err(w, deq, group_size), _group_err(w, deq_base, group_size)
    assert np.all(err <= err_base * (1 + 1e-6) + 1e-30)
    # Max-abs / min-max RTN bound: half a step per element, plus the clipping of the extreme values caused by
    # rounding the scale down to fp16 (at most 2^bits levels x half an fp16 ulp = s * 2^bits * 2^-11); asymmetric
    # adds the rounding of the zero point (half a step more at one end of the range).
    g = k if group_size == -1 else group_size
    s = np.repeat(base.scales.astype(np.float64), g, axis=0)
    tol = s * ((1.0 if asym else 0.5) + 2.0**bits * 2.0**-11)
    assert np.all(np.abs(deq_base - w) <= tol * (1 + 1e-6))
    # Relative Frobenius error in a sane range for RTN on gaussian weights.
    rel = np.linalg.norm(deq - w) / np.linalg.norm(w)
    assert rel < (0.05 if bits == 8 else 0.5), rel  # loose sanity (outlier rows inflate some scales)
    assert qw.u.dtype == np.uint8 and qw.u.max() < (1 << bits)
    # Scales are exactly representable in fp16 (rounded before the integers were chosen).
    assert np.array_equal(qw.scales, qw.scales.astype(np.float16).astype(np.float32))
    if asym:
        assert qw.zeros.shape == qw.scales.shape and np.array_equal(qw.zeros, np.rint(qw.zeros))
        assert qw.zeros.min() >= 0 and qw.zeros.max() <= (1 << bits) - 1
    else:
        assert qw.zeros is None


def test_search_improves_int4_on_outliers(rng):
    w = _weights(rng, 512, 128)
    err = np.square(quantize_rtn(w, 4, 128).dequantize() - w).sum()
    err_base = np.square(quantize_rtn(w, 4, 128, clip_ratios=(1.0,)).dequantize() - w).sum()
    assert err < err_base


def test_bf16_rounding_matches_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = (rng.standard_normal(100_000) * 10.0 ** rng.integers(-30, 30, 100_000)).astype(np.float32)
    ties = (np.arange(1, 1000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)  # exact halfway cases
    for v in (x, ties):
        assert np.array_equal(round_bf16(v), v.astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("act", ["fp16", "bf16"])
def test_scales_stored_in_act_dtype(rng, act):
    w = _weights(rng, 128, 64)
    qw = quantize_rtn(w, 4, 64, True, act)
    assert np.array_equal(round_to_act(qw.scales, act), qw.scales)
    packed, scales, zeros = weight_quantize(w, "weight_only_int4", 64, True, act)
    assert scales.dtype == act_numpy_dtype(act) and zeros.dtype == act_numpy_dtype(act)


@pytest.mark.parametrize("bits,group_size,asym", [(8, -1, False), (4, 128, False), (4, 32, True), (8, 64, True)])
def test_api_round_trip(rng, bits, group_size, asym):
    k, n = 256, 64
    w = _weights(rng, k, n)
    algo = f"weight_only_int{bits}"
    packed, scales, zeros = weight_quantize(w, algo, group_size, asym)
    assert packed.dtype == np.int32 and packed.shape == (n // (2 if bits == 8 else 4), k // 2)
    assert scales.shape == (k // (k if group_size == -1 else group_size), n) and scales.dtype == np.float16
    deq = weight_dequantize(packed, scales, zeros, algo=algo, group_size=group_size)
    expected = quantize_rtn(w, bits, group_size, asym).dequantize()
    assert np.array_equal(deq, expected)
    x = rng.standard_normal((3, 5, k)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float16)
    y = weight_only_linear(x, packed, scales, zeros, bias, algo=algo, group_size=group_size)
    ref = x.astype(np.float64) @ expected + bias.astype(np.float64)
    assert y.dtype == np.float16 and y.shape == (3, 5, n)
    assert np.all(np.abs(y - ref) <= np.abs(ref) * 2.0**-11 + 2.0**-24)  # one fp16 rounding of the result


def test_refusals_name_the_tensor(rng):
    w = _weights(rng, 128, 64)
    w[3, 4] = np.inf
    with pytest.raises(QuantizationError, match="my_weight.*NaN/Inf"):
        quantize_rtn(w, 4, 64, name="my_weight")
    with pytest.raises(QuantizationError, match="K=96 is not a multiple of group_size 64"):
        quantize_rtn(_weights(rng, 96, 64), 4, 64)
    with pytest.raises(QuantizationError, match="group_size"):
        quantize_rtn(_weights(rng, 128, 64), 4, 48)
    with pytest.raises(QuantizationError, match="algo"):
        weight_quantize(_weights(rng, 128, 64), "int3")
    with pytest.raises(QuantizationError, match="overflows fp16"):
        quantize_rtn(_weights(rng, 64, 8) * 1e9, 8, -1)


def test_zero_and_constant_groups(rng):
    w = np.zeros((128, 8), np.float32)
    w[:, 1] = 0.25  # constant column
    w[:64, 2] = rng.standard_normal(64)
    for asym in (False, True):
        qw = quantize_rtn(w, 4, 64, asym)
        assert np.all(np.isfinite(qw.scales)) and np.all(qw.scales > 0)
        assert np.allclose(qw.dequantize()[:, :2], w[:, :2], atol=1e-3)


@pytest.mark.parametrize("asym", [False, True])
def test_column_chunks_and_threads_give_the_same_result(rng, monkeypatch, asym):
    import graph_passes.quantizers.common as common

    w = _weights(rng, 128, 320)
    whole = quantize_rtn(w, 4, 64, asym)
    monkeypatch.setattr(common, "COLUMN_CHUNK", 96)  # 4 chunks, the last one ragged
    monkeypatch.setattr(common, "MAX_THREADS", 3)
    chunked = quantize_rtn(w, 4, 64, asym)
    assert np.array_equal(whole.u, chunked.u) and np.array_equal(whole.scales, chunked.scales)
    assert (whole.zeros is None) == (not asym) and (not asym or np.array_equal(whole.zeros, chunked.zeros))


@pytest.mark.parametrize("asym", [False, True])
def test_rel_error_matches_float64(rng, asym):
    w = _weights(rng, 256, 96)
    qw = quantize_rtn(w, 4, 64, asym)
    expected = np.linalg.norm(qw.dequantize() - w.astype(np.float64)) / np.linalg.norm(w.astype(np.float64))
    assert abs(qw.rel_error - expected) <= 1e-4 * expected
    assert quantize_rtn(np.zeros((64, 8), np.float32), 8, -1).rel_error == 0.0
