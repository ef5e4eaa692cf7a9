"""Integer weight formats (INT8, INT4): round to nearest with a per-group scale search. Pure numpy.

Conventions (``docs/layouts.md``): the weight is ``W[K, N]`` (ONNX MatMul orientation); quantization stores unsigned
``U[K, N]`` in ``[0, 2**bits)`` and per group of ``G`` consecutive ``k`` a scale ``S[K/G, N]`` and a zero point
``Z[K/G, N]``, with ``W ~ (U - Z) * S``. Symmetric quantization stores no zero point: ``Z = 2**(bits-1)`` implicitly.

How a group's scale is chosen: for each candidate clipping ratio ``r`` (1.0 is plain max-abs / min-max) the scale
``r * range / levels`` is rounded to the activation dtype FIRST (that is what the kernels read), the group is
quantized with that exact scale (and, asymmetric, its integer zero point), and the candidate with the smallest
reconstruction error ``sum((W - (U - Z) * S)**2)`` over the group wins. Ratio 1.0 is always a candidate, so the
search never does worse than max-abs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.dtypes import act_numpy_dtype
from graph_passes.errors import QuantizationError
from graph_passes.quantizers.common import DEFAULT_CLIP_RATIOS, check_weight, for_column_chunks, round_scales


@dataclass
class QuantizedWeight:
    """Integer codes ``u`` uint8 [K, N]; ``scales`` / ``zeros`` [K/G, N] float32 holding act-dtype-exact values."""

    u: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray | None
    bits: int
    group_size: int
    act_dtype: str
    sq_error: float = float("nan")  # sum of (W - dequantized)^2 over the weight (float32 sums)
    sq_norm: float = float("nan")   # sum of W^2

    @property
    def rel_error(self) -> float:
        """Relative RMS reconstruction error ||W - dequant|| / ||W|| (0 for an all-zero weight)."""
        return float(np.sqrt(self.sq_error / self.sq_norm)) if self.sq_norm > 0 else 0.0

    @property
    def k(self) -> int:
        return self.u.shape[0]

    @property
    def n(self) -> int:
        return self.u.shape[1]

    def dequantize(self) -> np.ndarray:
        """float64 W[K, N] = (U - Z) * S."""
        g = self.k if self.group_size == -1 else self.group_size
        s = np.repeat(self.scales.astype(np.float64), g, axis=0)
        z = (1 << (self.bits - 1)) if self.zeros is None else np.repeat(self.zeros.astype(np.float64), g, axis=0)
        return (self.u.astype(np.float64) - z) * s


def _quantize_sym(wg, s, qmax, out):
    """out <- clip(rint(wg / s), -qmax - 1, qmax) in place (one formula for the search and the result)."""
    np.divide(wg, s[:, None, :], out=out)
    np.rint(out, out=out)
    return np.clip(out, -qmax - 1, qmax, out=out)


def _quantize_asym(wg, s, z, levels, out):
    """out <- clip(rint(wg / s) + z, 0, levels) in place."""
    np.divide(wg, s[:, None, :], out=out)
    np.rint(out, out=out)
    out += z[:, None, :]
    return np.clip(out, 0, levels, out=out)


def _group_sq_err(wg, deq):
    """Sum over each group of (deq - wg)^2; ``deq`` is overwritten."""
    np.subtract(deq, wg, out=deq)
    np.square(deq, out=deq)
    return deq.sum(axis=1)


def _search_symmetric(wg, bits, act_dtype, ratios, name):
    """wg [Gc, G, N] float32 -> (q [Gc, G, N] float32 in [-2^(b-1), 2^(b-1)-1], s [Gc, N])."""
    qmax = (1 << (bits - 1)) - 1
    amax = np.abs(wg).max(axis=1)
    best_err = np.full(amax.shape, np.inf, np.float32)
    best_s = np.ones_like(amax)
    buf = np.empty_like(wg)
    for r in ratios:
        s = round_scales(amax * np.float32(r / qmax), act_dtype, name)
        q = _quantize_sym(wg, s, qmax, buf)
        q *= s[:, None, :]
        err = _group_sq_err(wg, q)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_s = np.where(better, s, best_s)
    return _quantize_sym(wg, best_s, qmax, buf), best_s, best_err


def _search_asymmetric(wg, bits, act_dtype, ratios, name):
    """wg [Gc, G, N] float32 -> (u [Gc, G, N] float32 in [0, 2^b-1], s [Gc, N], z [Gc, N] integer-valued)."""
    levels = (1 << bits) - 1
    wmin = wg.min(axis=1)
    wmax = wg.max(axis=1)
    best_err = np.full(wmin.shape, np.inf, np.float32)
    best_s = np.ones_like(wmin)
    best_z = np.zeros_like(wmin)
    buf = np.empty_like(wg)
    for r in ratios:
        lo, hi = wmin * np.float32(r), wmax * np.float32(r)
        span = hi - lo
        span = np.where(span > 0, span, np.maximum(np.abs(hi), np.abs(lo)))  # constant group: any scale works
        s = round_scales(span / np.float32(levels), act_dtype, name)
        z = np.clip(np.rint(-lo / s), 0, levels)
        u = _quantize_asym(wg, s, z, levels, buf)
        u -= z[:, None, :]
        u *= s[:, None, :]
        err = _group_sq_err(wg, u)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_s = np.where(better, s, best_s)
        best_z = np.where(better, z, best_z)
    return _quantize_asym(wg, best_s, best_z, levels, buf), best_s, best_z, best_err


def quantize_rtn(w: np.ndarray, bits: int, group_size: int = -1, asymmetric: bool = False, act_dtype: str = "fp16",
                 clip_ratios=DEFAULT_CLIP_RATIOS, name: str = "weight") -> QuantizedWeight:
    """Quantize ``w[K, N]`` (any float dtype) to ``bits``-bit integers with the per-group scale search.

    ``clip_ratios=(1.0,)`` gives plain max-abs (symmetric) / min-max (asymmetric) RTN.
    """
    if not 2 <= bits <= 8:
        raise QuantizationError(f"{name}: integer codes take 2 to 8 bits, got {bits}")
    act_numpy_dtype(act_dtype)  # validates the name
    w = np.asarray(w)
    check_weight(w, group_size, name)
    k, n = w.shape
    g = k if group_size == -1 else group_size
    ratios = tuple(clip_ratios)
    if not ratios or 1.0 not in ratios:
        ratios = (1.0,) + ratios
    u = np.empty((k, n), np.uint8)
    scales = np.empty((k // g, n), np.float32)
    zeros = np.empty((k // g, n), np.float32) if asymmetric else None

    def one_chunk(c0: int, c1: int) -> tuple[float, float]:
        wg = np.ascontiguousarray(w[:, c0:c1], np.float32).reshape(k // g, g, c1 - c0)
        if asymmetric:
            uc, s, z, err = _search_asymmetric(wg, bits, act_dtype, ratios, name)
            zeros[:, c0:c1] = z
        else:
            q, s, err = _search_symmetric(wg, bits, act_dtype, ratios, name)
            uc = q + (1 << (bits - 1))
        u[:, c0:c1] = uc.reshape(k, c1 - c0).astype(np.uint8)
        scales[:, c0:c1] = s
        return float(err.sum(dtype=np.float64)), float(np.square(wg).sum(dtype=np.float64))

    sums = for_column_chunks(k, n, one_chunk)
    return QuantizedWeight(u=u, scales=scales, zeros=zeros, bits=bits, group_size=group_size, act_dtype=act_dtype,
                           sq_error=sum(e for e, _ in sums), sq_norm=sum(w2 for _, w2 in sums))
