"""What a calibrated method needs from a weight format: a group codec, and the clip-ratio search over it.

A method (AWQ, GPTQ) never does format arithmetic itself; it receives a :class:`GroupCodec` whose callables
  * ``fit(wg, ratio) -> params``: the format's parameters of each group for one clip ratio (``wg`` [ng, G, N],
    params a tuple of arrays [ng, N], e.g. (scales,) or (scales, zeros)); values exactly as the kernels will read them;
  * ``quantize(wg, params) -> codes`` and ``dequantize(codes, params) -> float32``, with params broadcast over the
    group axis (a single row ``[ng, 1, N]`` works too);
  * ``assemble(codes [K, N], params of shape [K/G, N]) -> QuantizedWeight`` for the rewrite passes.
:func:`int_codec` builds it for INT4 / INT8 from :mod:`graph_passes.quantize`, :func:`fp6_codec` for FP6 E3M2.

:func:`search_params` picks per group and output column the ratio of least error: the weight's squared error (what
RTN does) or, given the group's block of the input Gram matrix ``H = X^T X``, the output error ``d^T H d``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from graph_passes import fp6_e3m2
from graph_passes.errors import QuantizationError
from graph_passes.quantizers import DEFAULT_CLIP_RATIOS, Fp6Weight, QuantizedWeight, round_scales
from graph_passes.quantizers.common import for_column_chunks


@dataclass(frozen=True)
class GroupCodec:
    group_size: int  # rows of W (input channels) per scale group; -1: one group of K rows
    ratios: tuple[float, ...]
    fit: Callable
    quantize: Callable
    dequantize: Callable
    assemble: Callable

    def rows_per_group(self, k: int) -> int:
        return k if self.group_size == -1 else self.group_size

    def fake_quant(self, wg: np.ndarray, params) -> np.ndarray:
        """dequantize(quantize(wg)) in float32."""
        return self.dequantize(self.quantize(wg, params), params)


def _expand(params):
    return tuple(p[:, None, :] for p in params)


def int_codec(bits: int, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios=DEFAULT_CLIP_RATIOS,
              name: str = "weight") -> GroupCodec:
    """The INT4 / INT8 format of :func:`graph_passes.quantizers.quantize_rtn` (same scales, rounding and codes)."""
    levels = (1 << bits) - 1
    half = 1 << (bits - 1)

    def scale(raw):
        return round_scales(raw, act_dtype, name).astype(np.float32)

    def fit(wg, ratio):
        r = np.float32(ratio)
        if not asymmetric:
            return (scale(np.abs(wg).max(axis=1) * np.float32(ratio / (half - 1))),)
        lo, hi = wg.min(axis=1) * r, wg.max(axis=1) * r
        span = hi - lo
        span = np.where(span > 0, span, np.maximum(np.abs(hi), np.abs(lo)))  # constant group: any scale works
        s = scale(span / np.float32(levels))
        return s, np.clip(np.rint(-lo / s), 0, levels).astype(np.float32)

    def quantize(wg, params):
        p = _expand(params)
        q = np.rint(wg / p[0])
        if asymmetric:
            return np.clip(q + p[1], 0, levels)
        return np.clip(q, -half, half - 1) + half

    def dequantize(codes, params):
        p = _expand(params)
        return (codes - (p[1] if asymmetric else np.float32(half))) * p[0]

    def assemble(codes, params):
        return QuantizedWeight(u=codes.astype(np.uint8), scales=params[0].astype(np.float32),
                               zeros=params[1].astype(np.float32) if asymmetric else None, bits=bits,
                               group_size=group_size, act_dtype=act_dtype)

    ratios = tuple(clip_ratios) if 1.0 in clip_ratios else (1.0, *clip_ratios)
    return GroupCodec(group_size=group_size, ratios=ratios, fit=fit, quantize=quantize, dequantize=dequantize,
                      assemble=assemble)


def fp6_codec(bits: int, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios=DEFAULT_CLIP_RATIOS,
              name: str = "weight") -> GroupCodec:
    """FP6 E3M2 (:func:`graph_passes.quantizers.quantize_fp6`: scale ``ratio * max|w| / 28``, codes of
    :func:`graph_passes.fp6_e3m2.encode`); symmetric only."""
    if bits != fp6_e3m2.BITS or asymmetric:
        raise QuantizationError(f"{name}: FP6 E3M2 is a signed 6-bit float: bits 6, symmetric only")

    def fit(wg, ratio):
        return (round_scales(np.abs(wg).max(axis=1) * np.float32(ratio / fp6_e3m2.FP6_MAX), act_dtype,
                             name).astype(np.float32),)

    def quantize(wg, params):
        return fp6_e3m2.encode(wg / _expand(params)[0]).astype(np.float32)

    def dequantize(codes, params):
        return (fp6_e3m2.decode(codes.astype(np.uint8)) * _expand(params)[0]).astype(np.float32)

    def assemble(codes, params):
        return Fp6Weight(u=codes.astype(np.uint8), scales=params[0].astype(np.float32), group_size=group_size,
                         act_dtype=act_dtype)

    ratios = tuple(clip_ratios) if 1.0 in clip_ratios else (1.0, *clip_ratios)
    return GroupCodec(group_size=group_size, ratios=ratios, fit=fit, quantize=quantize, dequantize=dequantize,
                      assemble=assemble)


def search_params(codec: GroupCodec, wg: np.ndarray, row_weights: np.ndarray | None = None,
                  hblocks: np.ndarray | None = None):
    """Per group and column, the params of the clip ratio with the least error (ratio 1.0 first, kept on ties).

    ``wg`` [ng, G, N] float32. The error is the weight's squared error, weighted per row by ``row_weights``
    [ng, G, 1] when given (e.g. diag(H)), or the output error ``d^T H_g d`` given ``hblocks`` [ng, G, G].
    Columns are independent: chunks of them are searched in parallel threads.
    """
    chunks = for_column_chunks(wg.shape[0] * wg.shape[1], wg.shape[2],
                               lambda c0, c1: _search(codec, wg[:, :, c0:c1], row_weights, hblocks))
    return tuple(np.concatenate([c[i] for c in chunks], axis=1) for i in range(len(chunks[0])))


def _search(codec: GroupCodec, wg: np.ndarray, row_weights, hblocks):
    best = None
    best_err = None
    h32 = None if hblocks is None else hblocks.astype(np.float32)
    for r in codec.ratios:
        params = codec.fit(wg, r)
        d = codec.fake_quant(wg, params) - wg
        if h32 is not None:
            err = np.einsum("gin,gin->gn", d, np.matmul(h32, d))
        elif row_weights is not None:
            err = (row_weights * np.square(d)).sum(axis=1)
        else:
            err = np.square(d).sum(axis=1)
        if best is None:
            best, best_err = params, err
            continue
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best = tuple(np.where(better, new, old) for new, old in zip(params, best))
    return best


def finish_weight(codec: GroupCodec, codes: np.ndarray, params, w: np.ndarray) -> QuantizedWeight:
    """The codec's QuantizedWeight of ``codes`` [K, N] with its error against ``w``."""
    k, n = codes.shape
    g = codec.rows_per_group(k)
    qw = codec.assemble(codes, params)
    d = codec.dequantize(codes.reshape(k // g, g, n), params).reshape(k, n)
    d -= w
    np.square(d, out=d)
    qw.sq_error = float(d.sum(dtype=np.float64))  # float64 sums without a float64 copy of the weight
    qw.sq_norm = float(np.square(w).sum(dtype=np.float64))
    return qw


def quantize_weight(codec: GroupCodec, w: np.ndarray, row_weights: np.ndarray | None = None,
                    hblocks: np.ndarray | None = None) -> QuantizedWeight:
    """Quantize ``w`` [K, N] with the ratio search of :func:`search_params` (``row_weights`` [K] or ``hblocks``)."""
    k, n = w.shape
    g = codec.rows_per_group(k)
    w = np.ascontiguousarray(w, np.float32)
    wg = w.reshape(k // g, g, n)
    rw = None if row_weights is None else np.asarray(row_weights, np.float32).reshape(k // g, g, 1)
    params = search_params(codec, wg, rw, hblocks)
    return finish_weight(codec, codec.quantize(wg, params).reshape(k, n), params, w)
