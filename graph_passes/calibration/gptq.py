"""GPTQ (Frantar et al., 2022): quantize W [K, N] one input row at a time, spreading each row's rounding error over
the rows not yet quantized through the inverse Hessian ``H = X^T X / n`` of the layer's calibration inputs.

  * Inverse: ``H + damp * mean(diag H) * I`` (dead inputs, diag 0, get diag 1 first: their error spreads nowhere),
    Cholesky-factored and inverted in float64; when not positive definite the dampening grows tenfold (reported).
  * Lazy batches: rows go in blocks of 128; a block's rows are updated eagerly in sub-blocks of 16 (rank-1 updates
    inside a sub-block, a matrix product for the rest of the block), the rows after the block by one matrix product
    per block (float32 BLAS).
  * Groups: a group's parameters are fitted (the codec's clip-ratio search) when its first row is reached, on the
    weights as updated so far; no activation reordering, so the stored layout stays the plain group layout.
The format enters only through the :class:`~graph_passes.calibration.codec.GroupCodec`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.calibration.codec import GroupCodec, finish_weight, search_params
from graph_passes.errors import QuantizationError
from graph_passes.quantize import QuantizedWeight

BLOCK = 128
SUB_BLOCK = 16
DEFAULT_DAMP = 0.01
_MAX_DAMP_RETRIES = 4


@dataclass
class InverseHessian:
    """Upper Cholesky factor ``U`` of the dampened inverse Hessian (``U^T U = (H + lambda I)^-1``) and how it was
    made."""

    upper: np.ndarray   # float32 [K, K]
    damp: float         # relative dampening finally used
    dead: int           # inputs with zero diagonal (never active in the calibration data)
    diag: np.ndarray    # float64 [K]: diag(H / n) before dampening (for the output-error clip search)


def inverse_hessian(gram: np.ndarray, n_rows: int, damp: float = DEFAULT_DAMP, name: str = "") -> InverseHessian:
    """Factor ``gram`` (sum of x^T x over ``n_rows`` rows, float64)."""
    h = np.array(gram, np.float64) / max(n_rows, 1)
    diag = np.diag(h).copy()
    dead = diag <= 0
    h[dead, :] = 0.0
    h[:, dead] = 0.0
    h[dead, dead] = 1.0
    mean_diag = float(np.mean(np.diag(h)))
    rev = h[::-1, ::-1]
    d = damp
    for _ in range(_MAX_DAMP_RETRIES + 1):
        try:
            lower = np.linalg.cholesky(rev + np.eye(h.shape[0]) * (d * mean_diag))
        except np.linalg.LinAlgError:
            d *= 10
            continue
        # With P the reversal, P H P = L L^T gives H^-1 = U^T U for U = P L^-1 P, which is upper triangular.
        upper = _inv_lower(lower)[::-1, ::-1]
        if np.isfinite(upper).all():
            return InverseHessian(upper=np.ascontiguousarray(upper, np.float32), damp=d, dead=int(dead.sum()),
                                  diag=diag)
        d *= 10
    raise QuantizationError(f"{name}: the calibration Hessian is not positive definite even with dampening {d / 10:g}"
                            f"; give more calibration samples or use --method awq / rtn for it")


def _inv_lower(lower: np.ndarray) -> np.ndarray:
    """Inverse of a lower-triangular matrix by 2 x 2 blocks (matrix products do the work; numpy has no trtri)."""
    n = lower.shape[0]
    if n <= 256:
        return np.tril(np.linalg.inv(lower))
    m = n // 2
    a = _inv_lower(lower[:m, :m])
    c = _inv_lower(lower[m:, m:])
    out = np.zeros_like(lower)
    out[:m, :m] = a
    out[m:, m:] = c
    out[m:, :m] = -(c @ lower[m:, :m]) @ a
    return out


def gptq_quantize(w: np.ndarray, hinv: InverseHessian, codec: GroupCodec, *, output_clip: bool = True,
                  name: str = "weight") -> QuantizedWeight:
    """GPTQ of ``w`` [K, N]; returns the codec's QuantizedWeight (``sq_error`` against ``w``).

    ``output_clip``: the group's clip-ratio search weights each row's squared error by diag(H) (the error the row
    adds to the output, ignoring cross terms); otherwise by 1 (plain weight error, RTN's search).
    """
    w0 = np.asarray(w, np.float32)
    k, n = w0.shape
    g = codec.rows_per_group(k)
    if k % g:
        raise QuantizationError(f"{name}: K={k} is not a multiple of group size {g}")
    wq = w0.copy()              # rows updated as GPTQ goes; row r is final once quantized
    codes = np.empty((k, n), np.float32)
    groups = []                 # params of each group, in order
    u = hinv.upper
    weights = np.maximum(hinv.diag, 0).astype(np.float32) if output_clip else None
    params = None
    err = np.empty((BLOCK, n), np.float32)
    for b0 in range(0, k, BLOCK):
        b1 = min(b0 + BLOCK, k)
        for s0 in range(b0, b1, SUB_BLOCK):
            s1 = min(s0 + SUB_BLOCK, b1)
            for r in range(s0, s1):
                if r % g == 0:  # a group starts: its rows up to here are current (earlier updates applied)
                    wg = wq[r: r + g][None]
                    hb = None if weights is None else weights[r: r + g][None, :, None]
                    params = search_params(codec, wg, row_weights=hb)
                    groups.append(params)
                row = wq[r][None, None]
                c = codec.quantize(row, params)
                codes[r] = c[0, 0]
                e = (row[0, 0] - codec.dequantize(c, params)[0, 0]) / u[r, r]
                err[r - b0] = e
                if r + 1 < s1:
                    wq[r + 1: s1] -= np.outer(u[r, r + 1: s1], e)
            if s1 < b1:
                wq[s1:b1] -= u[s0:s1, s1:b1].T @ err[s0 - b0: s1 - b0]
        if b1 < k:
            wq[b1:] -= u[b0:b1, b1:].T @ err[: b1 - b0]
    stacked = tuple(np.concatenate([p[i] for p in groups], axis=0) for i in range(len(groups[0])))
    return finish_weight(codec, codes, stacked, w0)
