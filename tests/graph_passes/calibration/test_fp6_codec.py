"""The FP6 codec of the calibrated methods: the same format as the FP6 RTN quantizer, and GPTQ on it."""

from __future__ import annotations

import numpy as np
import pytest

from graph_passes.calibration.codec import fp6_codec, quantize_weight
from graph_passes.calibration.gptq import gptq_quantize, inverse_hessian
from graph_passes.calibration.stats import TensorStats
from graph_passes.errors import QuantizationError
from graph_passes.quantizers import quantize_fp6


@pytest.mark.parametrize("group_size", [-1, 32, 128])
@pytest.mark.parametrize("act_dtype", ["fp16", "bf16"])
def test_fp6_codec_search_equals_rtn(rng, group_size, act_dtype):
    w = (rng.standard_normal((256, 37)) * 0.05).astype(np.float32)
    w[rng.integers(0, 256, 3)] *= 8.0
    ref = quantize_fp6(w, 6, group_size, False, act_dtype)
    got = quantize_weight(fp6_codec(6, group_size, False, act_dtype), w)
    np.testing.assert_array_equal(got.u, ref.u)
    np.testing.assert_array_equal(got.scales, ref.scales)
    assert got.zeros is None and got.bits == 6
    np.testing.assert_array_equal(got.dequantize(), ref.dequantize())
    with pytest.raises(QuantizationError, match="symmetric only"):
        fp6_codec(6, group_size, True, act_dtype)


def test_gptq_on_fp6_lowers_output_error_on_correlated_inputs(rng):
    k, n = 256, 96
    basis = rng.standard_normal((k // 8, k))
    x = (rng.standard_normal((3072, k // 8)) @ basis).astype(np.float32)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    st = TensorStats(k, gram=True, max_rows=4096, seed=1)
    st.update(x[:2048])
    codec = fp6_codec(6, 128, False, "fp32")
    rtn = quantize_weight(codec, w)
    got = gptq_quantize(w, inverse_hessian(st.gram, st.n_rows), codec)
    x_eval = x[2048:].astype(np.float64)  # rows not used for the statistics
    err = [np.linalg.norm(x_eval @ (q.dequantize() - w)) / np.linalg.norm(x_eval @ w) for q in (rtn, got)]
    assert err[1] < 0.8 * err[0], err
    assert got.u.max() < 64
