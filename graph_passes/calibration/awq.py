"""AWQ (Lin et al., 2023): scale the input channels of a linear (or of all linears reading the same input) by
``s = mean|x|^alpha`` before quantizing ``diag(s) W``, and divide the input by ``s`` elsewhere (folded into the
producer or a ``Mul``), so that the salient channels (large activations) lose less to rounding.

  * ``alpha`` is searched on a grid in [0, 1) for the least output error ``||X (W - diag(1/s) Q(diag(s) W))||^2``
    on a random subsample of calibration rows (and, for wide layers, of output columns), with Q the format's plain
    max-abs quantizer (ratio 1.0), as the paper does; alpha = 0 is plain RTN, so the search never does worse on the
    rows it sees. ``s`` is normalized to a geometric mean of max and min of 1.
  * Then the clip search: per group and output column, the clip ratio of least output error ``d^T H_g d`` with H_g
    the group's diagonal block of the scaled inputs' Gram matrix (over all calibration rows), for groups of up to
    256 rows; per-channel weights use diag(H) only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.calibration.codec import GroupCodec, quantize_weight
from graph_passes.calibration.stats import TensorStats
from graph_passes.quantize import QuantizedWeight

ALPHA_GRID = tuple(i / 20 for i in range(20))
MAX_SEARCH_COLUMNS = 2048  # output columns sampled for the alpha search of wide layers
MIN_SCALE = 1e-4           # relative floor of mean|x| (dead channels would get a zero scale)
_MAX_BLOCK = 256           # largest group whose full Gram block enters the clip search


@dataclass
class AwqScales:
    scales: np.ndarray          # float32 [K]: multiply W's rows by it, divide the input by it
    alpha: float
    errors: dict                # alpha -> mean squared output error on the search rows (relative to RTN's)

    @property
    def identity(self) -> bool:
        return self.alpha == 0.0


def _fake_quant_plain(codec: GroupCodec, w: np.ndarray) -> np.ndarray:
    k, n = w.shape
    g = codec.rows_per_group(k)
    wg = w.reshape(k // g, g, n)
    return codec.fake_quant(wg, codec.fit(wg, 1.0)).reshape(k, n)


def search_scales(weights: list[np.ndarray], stats: TensorStats, codec: GroupCodec, *, grid=ALPHA_GRID,
                  max_columns: int = MAX_SEARCH_COLUMNS, seed: int = 0) -> AwqScales:
    """The AWQ scale of the input shared by ``weights`` (each [K, N_j]) from ``stats`` (needs ``rows``)."""
    x = stats.rows
    w = np.concatenate([np.asarray(wj, np.float32) for wj in weights], axis=1)
    if w.shape[1] > max_columns:
        cols = np.sort(np.random.default_rng(seed).choice(w.shape[1], max_columns, replace=False))
        w = w[:, cols]
    ref = x @ w
    mean_abs = stats.abs_mean.astype(np.float64)
    floor = MIN_SCALE * max(float(mean_abs.max()), np.finfo(np.float32).tiny)
    mean_abs = np.maximum(mean_abs, floor)
    errors = {}
    best = (np.inf, 0.0, np.ones(w.shape[0], np.float32))
    for alpha in grid:
        s = mean_abs ** alpha
        s = (s / np.sqrt(s.max() * s.min())).astype(np.float32)
        wq = _fake_quant_plain(codec, w * s[:, None]) / s[:, None]
        err = float(np.mean(np.square(x @ wq - ref, dtype=np.float32), dtype=np.float64))
        errors[alpha] = err
        if err < best[0]:
            best = (err, alpha, s)
    base = errors.get(0.0) or 1.0
    return AwqScales(scales=best[2], alpha=best[1], errors={a: e / base for a, e in errors.items()})


@dataclass
class ClipStats:
    """What the clip search needs of the scaled input (kept instead of its Gram matrix): the diagonal blocks
    [K/G, G, G] of ``diag(1/s) H diag(1/s)`` for groups of up to 256 rows, else None, and its diagonal [K]."""

    blocks: np.ndarray | None
    diag: np.ndarray


def clip_stats(stats: TensorStats, scales: np.ndarray, group: int) -> ClipStats:
    k = stats.k
    inv = 1.0 / scales.astype(np.float64)
    h = stats.gram / max(stats.n_rows, 1)
    diag = np.diag(h) * inv * inv
    if group > _MAX_BLOCK:
        return ClipStats(None, diag)
    idx = np.arange(k).reshape(k // group, group)
    blocks = h[idx[:, :, None], idx[:, None, :]] * inv[idx][:, :, None] * inv[idx][:, None, :]
    return ClipStats(blocks, diag)


def quantize_scaled(ws: np.ndarray, clip: ClipStats, codec: GroupCodec) -> QuantizedWeight:
    """Quantize the already scaled weight ``ws = diag(s) W`` with the output-error clip search."""
    if clip.blocks is not None:
        return quantize_weight(codec, ws, hblocks=clip.blocks)
    return quantize_weight(codec, ws, row_weights=clip.diag)
