"""FP6 quantizer: the scale search against plain max-abs, exactness of what it returns, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from graph_passes import fp6_e3m2 as F
from graph_passes.errors import QuantizationError
from graph_passes.dtypes import round_to_act
from graph_passes.quantizers.fp6 import quantize_fp6


@pytest.mark.parametrize("act_dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("group_size", [-1, 64, 128])
def test_search_never_worse_than_max_abs(act_dtype, group_size):
    rng = np.random.default_rng()
    k, n = 384, 37  # odd N: column chunks and scales with a ragged last chunk
    w = (rng.standard_t(4, size=(k, n)) * 0.05).astype(np.float32)
    plain = quantize_fp6(w, 6, group_size, False, act_dtype, clip_ratios=(1.0,))
    searched = quantize_fp6(w, 6, group_size, False, act_dtype)
    assert searched.sq_error <= plain.sq_error
    assert searched.rel_error < 0.06  # about 2 significant bits: 3-6 % RMS on heavy-tailed weights
    # What it reports is what it holds: scales exact in the act dtype, error recomputed from codes and scales.
    np.testing.assert_array_equal(searched.scales, round_to_act(searched.scales, act_dtype))
    deq = searched.dequantize()
    np.testing.assert_allclose(np.square(deq - w).sum(), searched.sq_error, rtol=1e-5)
    g = k if group_size == -1 else group_size
    assert searched.u.dtype == np.uint8 and searched.u.max() < 64
    assert searched.scales.shape == (k // g, n)
    # Max-abs: the largest magnitude of each group maps to 28 (up to the scale's rounding).
    amax = np.abs(w).reshape(k // g, g, n).max(axis=1)
    top = np.abs(F.decode(plain.u)).reshape(k // g, g, n).max(axis=1)
    np.testing.assert_allclose(top * plain.scales, amax, rtol=2 ** -6)


def test_zero_weight_and_refusals():
    q = quantize_fp6(np.zeros((128, 8), np.float32), 6, 64)
    assert (q.u == 0).all() and (q.scales > 0).all() and q.rel_error == 0.0
    with pytest.raises(QuantizationError, match="multiple of group_size"):
        quantize_fp6(np.ones((96, 4), np.float32), 6, 64)
    with pytest.raises(QuantizationError, match="NaN"):
        quantize_fp6(np.full((64, 4), np.nan, np.float32))
    with pytest.raises(QuantizationError, match="symmetric only"):
        quantize_fp6(np.ones((64, 4), np.float32), 6, -1, True)
    with pytest.raises(QuantizationError, match="overflows fp16"):
        quantize_fp6(np.full((64, 4), 6e5 * 28, np.float32))
