"""Pieces every weight quantizer shares: input checks, scale rounding, the clipping ratios of the scale search, and
the column-chunked parallel loop."""

from __future__ import annotations

import os

import numpy as np

from graph_passes.dtypes import round_to_act, tiny
from graph_passes.errors import QuantizationError

# Candidate clipping ratios of the scale search, 1.0 first (max-abs / min-max), then shrinking ranges.
DEFAULT_CLIP_RATIOS = tuple(float(r) for r in np.round(np.arange(1.0, 0.545, -0.025), 3))
COLUMN_CHUNK = 1024  # most columns per vectorized step (fewer for large K: about 4 M elements, 16 MiB, a chunk)
MAX_THREADS = min(8, os.cpu_count() or 1)  # chunks quantized in parallel (each holds ~3 chunk-sized temporaries)


def check_weight(w: np.ndarray, group_size: int, name: str = "weight") -> None:
    """Raise QuantizationError naming ``name`` for a weight that cannot be quantized with ``group_size``.

    The group sizes a format offers are checked by its registry entry; here only what the arithmetic needs.
    """
    if w.ndim != 2:
        raise QuantizationError(f"{name}: expected a 2-D [K, N] weight, got shape {tuple(w.shape)}")
    if group_size != -1 and group_size <= 0:
        raise QuantizationError(f"{name}: group_size must be -1 (per channel) or positive, got {group_size}")
    k = w.shape[0]
    if group_size != -1 and k % group_size:
        raise QuantizationError(f"{name}: K={k} is not a multiple of group_size {group_size}; "
                                f"use a group size dividing K or -1 (per channel)")
    if not np.isfinite(w).all():
        bad = int(np.size(w) - np.count_nonzero(np.isfinite(w)))
        raise QuantizationError(f"{name}: weight contains {bad} NaN/Inf value(s); fix the model or --exclude the node")


def round_scales(raw: np.ndarray, act_dtype: str, name: str) -> np.ndarray:
    """Scales rounded to the activation dtype (what the kernels read); zero becomes the dtype's smallest normal."""
    s = round_to_act(raw, act_dtype)
    if not np.isfinite(s).all():
        raise QuantizationError(f"{name}: a group's scale {float(np.max(raw)):.4g} overflows {act_dtype}; "
                                f"the weight is too large for {act_dtype} activations")
    return np.where(s > 0, s, np.float32(tiny(act_dtype)))


def for_column_chunks(k: int, n: int, fn) -> list:
    """``fn(c0, c1)`` over column ranges covering ``[0, n)``, in parallel threads; results in column order.

    ``fn`` must write only its own columns. numpy's ufuncs release the GIL, so the chunks really run in parallel.
    """
    cols = min(COLUMN_CHUNK, max(128, (1 << 22) // max(k, 1)))
    ranges = [(c0, min(n, c0 + cols)) for c0 in range(0, n, cols)]
    workers = min(len(ranges), MAX_THREADS)
    if workers <= 1:
        return [fn(c0, c1) for c0, c1 in ranges]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return [f.result() for f in [pool.submit(fn, c0, c1) for c0, c1 in ranges]]
