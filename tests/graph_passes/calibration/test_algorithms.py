"""The calibration algorithms on layers where the right answer is known (numpy only, float64 references)."""

from __future__ import annotations

import numpy as np
import pytest

from graph_passes.calibration.awq import clip_stats, quantize_scaled, search_scales
from graph_passes.calibration.codec import int_codec, quantize_weight
from graph_passes.calibration.gptq import gptq_quantize, inverse_hessian
from graph_passes.calibration.stats import TensorStats
from graph_passes.quantize import quantize_rtn


def _stats(x: np.ndarray, batches: int = 3, max_rows: int = 4096) -> TensorStats:
    st = TensorStats(x.shape[-1], gram=True, max_rows=max_rows, seed=1)
    for part in np.array_split(x, batches):
        st.update(part)
    return st


def _out_err(x: np.ndarray, w: np.ndarray, w_hat: np.ndarray) -> float:
    """Relative output error ||X (W_hat - W)|| / ||X W|| in float64."""
    x = x.astype(np.float64)
    return float(np.linalg.norm(x @ (w_hat - w)) / np.linalg.norm(x @ w))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("asymmetric", [False, True])
@pytest.mark.parametrize("group_size", [-1, 32, 128])
@pytest.mark.parametrize("act_dtype", ["fp16", "bf16"])
def test_int_codec_search_equals_rtn(rng, bits, asymmetric, group_size, act_dtype):
    """The codec the methods use is the RTN format itself: same codes, scales and zeros as quantize_rtn."""
    w = (rng.standard_normal((256, 37)) * 0.05).astype(np.float32)
    w[rng.integers(0, 256, 3)] *= 8.0
    ref = quantize_rtn(w, bits, group_size, asymmetric, act_dtype)
    got = quantize_weight(int_codec(bits, group_size, asymmetric, act_dtype), w)
    np.testing.assert_array_equal(got.u, ref.u)
    np.testing.assert_array_equal(got.scales, ref.scales)
    if asymmetric:
        np.testing.assert_array_equal(got.zeros, ref.zeros)
    else:
        assert got.zeros is None
    np.testing.assert_allclose(got.dequantize(), ref.dequantize(), rtol=0, atol=0)


def test_stats_match_direct_computation(rng):
    x = rng.standard_normal((5, 23, 48)).astype(np.float32) * rng.uniform(0.1, 3.0, 48).astype(np.float32)
    st = TensorStats(48, gram=True, max_rows=40, seed=3)
    for i in range(5):
        st.update(x[i])
    rows = x.reshape(-1, 48).astype(np.float64)
    assert st.n_rows == 115
    np.testing.assert_allclose(st.abs_mean, np.abs(rows).mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(st.gram, rows.T @ rows, rtol=1e-10)
    kept = st.rows
    assert kept.shape == (40, 48)
    # every kept row is one of the rows seen, none twice
    index = {r.tobytes(): i for i, r in enumerate(x.reshape(-1, 48))}
    picked = [index[r.tobytes()] for r in kept]
    assert len(set(picked)) == 40


def test_reservoir_is_uniform():
    """Each of 400 rows fed in batches of 50 is kept with probability 100/400 (checked over 300 seeds)."""
    counts = np.zeros(400)
    x = np.arange(400, dtype=np.float32)[:, None].repeat(2, axis=1)
    for seed in range(300):
        st = TensorStats(2, gram=False, max_rows=100, seed=seed)
        for part in np.split(x, 8):
            st.update(part)
        counts[st.rows[:, 0].astype(int)] += 1
    freq = counts / 300
    assert abs(freq.mean() - 0.25) < 1e-12
    # first and last quarter kept equally often (binomial sd of a quarter's mean ~ 0.005)
    assert abs(freq[:100].mean() - freq[300:].mean()) < 0.03


def test_inverse_hessian_is_cholesky_of_inverse(rng):
    k = 600  # > 256: the blocked triangular inverse recurses
    x = rng.standard_normal((900, k)) @ (np.eye(k) + 0.2 * rng.standard_normal((k, k)) / np.sqrt(k))
    gram = x.T @ x
    got = inverse_hessian(gram, 900, 0.01)
    h = gram / 900
    h += np.eye(k) * 0.01 * np.mean(np.diag(h))
    ref = np.linalg.cholesky(np.linalg.inv(h)).T
    assert got.damp == 0.01 and got.dead == 0
    np.testing.assert_allclose(got.upper, ref, atol=1e-5 * np.abs(ref).max())


def _correlated(rng, rows, basis):
    """Inputs with strongly correlated channels (a low-rank mix ``basis`` plus noise), as real activations are."""
    r, k = basis.shape
    return (rng.standard_normal((rows, r)) @ basis + 0.3 * rng.standard_normal((rows, k))).astype(np.float32)


@pytest.mark.parametrize("bits,group_size", [(4, 128), (4, 32), (4, -1), (8, 64)])
def test_gptq_lowers_output_error_on_correlated_inputs(rng, bits, group_size):
    k, n = 256, 96
    basis = rng.standard_normal((k // 8, k))
    x = _correlated(rng, 2048, basis)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    st = _stats(x)
    codec = int_codec(bits, group_size, False, "fp32")
    rtn = quantize_weight(codec, w)
    got = gptq_quantize(w, inverse_hessian(st.gram, st.n_rows), codec)
    x_eval = _correlated(rng, 1024, basis)  # fresh rows of the same distribution: no overfitting
    e_rtn, e_gptq = _out_err(x_eval, w, rtn.dequantize()), _out_err(x_eval, w, got.dequantize())
    print(f"INT{bits} g{group_size}: output error RTN {e_rtn:.4f}, GPTQ {e_gptq:.4f}")
    assert e_gptq < 0.8 * e_rtn
    assert got.u.min() >= 0 and got.u.max() < 2**bits


def test_gptq_dead_inputs(rng):
    """Input channels that are always zero: no NaN, and the live part is still improved over RTN."""
    k, n = 128, 64
    x = _correlated(rng, 1024, rng.standard_normal((k // 8, k)))
    dead = rng.choice(k, 10, replace=False)
    x[:, dead] = 0
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    st = _stats(x)
    hinv = inverse_hessian(st.gram, st.n_rows)
    assert hinv.dead == 10
    codec = int_codec(4, 32, False, "fp16")
    got = gptq_quantize(w, hinv, codec)
    assert np.isfinite(got.dequantize()).all()
    assert _out_err(x, w, got.dequantize()) < _out_err(x, w, quantize_weight(codec, w).dequantize())


def test_gptq_single_row_error_equals_rtn_row(rng):
    """With H = I (uncorrelated unit inputs, no spreading) GPTQ is RTN: same codes and scales."""
    k, n = 128, 40
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    codec = int_codec(4, 64, True, "fp16")
    got = gptq_quantize(w, inverse_hessian(np.eye(k) * 7, 7, damp=0.0), codec, output_clip=False)
    ref = quantize_weight(codec, w)
    np.testing.assert_array_equal(got.u, ref.u)
    np.testing.assert_array_equal(got.scales, ref.scales)


def _outlier_layer(rng, rows, k=256, n=128, outliers=4):
    """A layer whose inputs have a few channels 30-60x larger than the rest (LLM-style outlier features)."""
    big = rng.choice(k, outliers, replace=False)
    gain = np.ones(k)
    gain[big] = rng.uniform(30, 60, outliers)
    x = (rng.standard_normal((rows, k)) * gain).astype(np.float32)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    return x, w, gain


@pytest.mark.parametrize("group_size", [128, -1])
def test_awq_beats_rtn_on_outlier_channels(rng, group_size):
    x, w, gain = _outlier_layer(rng, 2048)
    st = _stats(x)
    codec = int_codec(4, group_size, False, "fp16")
    found = search_scales([w], st, codec)
    assert found.alpha > 0 and not found.identity
    big = gain > 1
    assert found.scales[big].min() > found.scales[~big].max()  # the salient channels get the largest scales
    q = quantize_scaled(w * found.scales[:, None], clip_stats(st, found.scales, codec.rows_per_group(256)), codec)
    w_hat = q.dequantize() / found.scales[:, None]
    x_eval = (rng.standard_normal((1024, w.shape[0])) * gain).astype(np.float32)  # fresh rows
    e_rtn = _out_err(x_eval, w, quantize_weight(codec, w).dequantize())
    e_awq = _out_err(x_eval, w, w_hat)
    print(f"g{group_size}: output error RTN {e_rtn:.4f}, AWQ {e_awq:.4f} (alpha {found.alpha})")
    assert e_awq < 0.7 * e_rtn


def test_awq_keeps_identity_when_nothing_to_gain(rng):
    """alpha = 0 (plain RTN) is in the grid: the search never returns something worse on its rows."""
    x = rng.standard_normal((512, 128)).astype(np.float32)
    w = (rng.standard_normal((128, 64)) * 0.05).astype(np.float32)
    found = search_scales([w], _stats(x), int_codec(8, 64, False, "fp32"))
    assert min(found.errors.values()) == found.errors[found.alpha] <= found.errors[0.0] == 1.0


def test_clip_stats_are_scaled_diagonal_blocks(rng):
    x = rng.standard_normal((100, 64)).astype(np.float32).astype(np.float64)  # the statistics read float32
    st = _stats(x)
    s = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    clip = clip_stats(st, s, 32)
    h = (x.T @ x / 100) / np.outer(s.astype(np.float64), s.astype(np.float64))
    np.testing.assert_allclose(clip.blocks[1], h[32:, 32:], rtol=1e-10)
    np.testing.assert_allclose(clip.diag, np.diag(h), rtol=1e-10)
    assert clip_stats(st, s, 512).blocks is None
