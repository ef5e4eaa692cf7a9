"""FP6 E3M2 weight-only quantization: per-group scales by the clipping-ratio search. Pure numpy.

A weight is ``W[k, n] ~ decode(C[k, n]) * S[k // G, n]`` (codec: ``graph_passes/fp6_e3m2.py``): one scale per
group of ``G`` consecutive ``k`` in a column (``G = K`` for ``group_size = -1``), no zero point (the format is
signed).

The scale search is the integer one (``graph_passes/quantizers/integer.py``): for each clipping ratio ``r`` the
candidate scale ``r * max|W_group| / 28`` is rounded to the activation dtype first (what the kernels read), the group
is rounded to FP6 with that exact scale, and the ratio with the smallest ``sum((W - decode(C) * S)**2)`` wins; ratio
1.0 (max-abs) is always a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.dtypes import act_numpy_dtype
from graph_passes.errors import QuantizationError
from graph_passes.fp6_e3m2 import BITS, FP6_MAX, dequantize, encode, round_magnitude
from graph_passes.quantizers.common import DEFAULT_CLIP_RATIOS, check_weight, for_column_chunks, round_scales


@dataclass
class Fp6Weight:
    """``u`` uint8 [K, N] FP6 E3M2 codes; ``scales`` [K/G, N] float32 holding act-dtype-exact values; no zeros."""

    u: np.ndarray
    scales: np.ndarray
    group_size: int
    act_dtype: str
    sq_error: float = float("nan")  # sum of (W - dequantized)^2
    sq_norm: float = float("nan")   # sum of W^2

    bits = BITS
    zeros = None

    @property
    def rel_error(self) -> float:
        """Relative RMS reconstruction error ||W - dequant|| / ||W|| (0 for an all-zero weight)."""
        return float(np.sqrt(self.sq_error / self.sq_norm)) if self.sq_norm > 0 else 0.0

    def dequantize(self) -> np.ndarray:
        """float64 W[K, N] = decode(C) * S."""
        return dequantize(self.u, self.scales, self.group_size)


def _search(wg: np.ndarray, act_dtype: str, ratios, name: str):
    """wg [K/G, G, C] float32 -> (codes [K/G, G, C] uint8, scales [K/G, C] float32, squared error, squared norm)."""
    mag = np.abs(wg)  # rounding is symmetric: the search works on magnitudes
    amax = mag.max(axis=1)
    best_err = np.full(amax.shape, np.inf)
    best_s = np.ones(amax.shape, np.float32)
    for r in ratios:
        s = round_scales(amax * np.float32(r / FP6_MAX), act_dtype, name)[:, None, :]
        d = round_magnitude(mag / s)
        d *= s
        d -= mag
        err = np.square(d, out=d).sum(axis=1, dtype=np.float64)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_s = np.where(better, s[:, 0, :], best_s)
    return encode(wg / best_s[:, None, :]), best_s, float(best_err.sum()), float(np.square(wg).sum(dtype=np.float64))


def quantize_fp6(w: np.ndarray, bits: int = BITS, group_size: int = -1, asymmetric: bool = False,
                 act_dtype: str = "fp16", clip_ratios=DEFAULT_CLIP_RATIOS, name: str = "weight") -> Fp6Weight:
    """Quantize ``w[K, N]`` to FP6 E3M2 codes with per-group scales chosen by the clipping-ratio search (the
    quantizer signature of ``graph_passes.quantizers``; ``bits`` must be 6 and ``asymmetric`` False)."""
    if bits != BITS or asymmetric:
        raise QuantizationError(f"{name}: FP6 E3M2 is a signed 6-bit float: bits 6, symmetric only")
    act_numpy_dtype(act_dtype)  # validates the name
    w = np.asarray(w)
    check_weight(w, group_size, name)
    ratios = (1.0,) + tuple(r for r in clip_ratios if r != 1.0)  # max-abs always competes
    k, n = w.shape
    g = k if group_size == -1 else group_size
    codes = np.empty((k, n), np.uint8)
    scales = np.empty((k // g, n), np.float32)

    def one_chunk(c0: int, c1: int) -> tuple[float, float]:
        wg = np.ascontiguousarray(w[:, c0:c1], np.float32).reshape(k // g, g, c1 - c0)
        cc, s, err, w2 = _search(wg, act_dtype, ratios, name)
        codes[:, c0:c1] = cc.reshape(k, c1 - c0)
        scales[:, c0:c1] = s
        return err, w2

    sums = for_column_chunks(k, n, one_chunk)
    return Fp6Weight(u=codes, scales=scales, group_size=group_size, act_dtype=act_dtype,
                     sq_error=sum(e for e, _ in sums), sq_norm=sum(w2 for _, w2 in sums))
