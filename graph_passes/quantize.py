"""Round-to-nearest (RTN) weight-only quantization, INT8 / INT4, per channel or per group along K. Pure numpy.

Conventions (``docs/layouts.md``): the weight is ``W[K, N]`` (ONNX MatMul orientation); quantization stores unsigned
``U[K, N]`` in ``[0, 2**bits)`` and per group of ``G`` consecutive ``k`` a scale ``S[K/G, N]`` and a zero point
``Z[K/G, N]``, with ``W ~ (U - Z) * S``. Symmetric quantization stores no zero point: ``Z = 2**(bits-1)`` implicitly.

How a group's scale is chosen: for each candidate clipping ratio ``r`` (1.0 is plain max-abs / min-max) the scale
``r * range / levels`` is rounded to the activation dtype FIRST (that is what the kernels read), the group is
quantized with that exact scale (and, asymmetric, its integer zero point), and the candidate with the smallest
reconstruction error ``sum((W - (U - Z) * S)**2)`` over the group wins. Ratio 1.0 is always a candidate, so the
search never does worse than max-abs.

Public API in the spirit of Paddle's ``weight_quantize`` / ``weight_dequantize`` / ``weight_only_linear``; the packed
tensor uses layout ``interleaved_v1`` (int32 ``[N/I, K/2]``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.layouts import get_layout

ALGOS = {"weight_only_int8": 8, "weight_only_int4": 4}
GROUP_SIZES = (-1, 32, 64, 128, 256)
ACT_DTYPES = ("fp16", "bf16", "fp32")  # fp32: reference only (the op and Q/DQ checks at float32 precision)
# Candidate clipping ratios of the scale search, 1.0 first (max-abs / min-max), then shrinking ranges.
DEFAULT_CLIP_RATIOS = tuple(float(r) for r in np.round(np.arange(1.0, 0.545, -0.025), 3))
_COLUMN_CHUNK = 1024  # most columns per vectorized step (fewer for large K: about 4 M elements, 16 MiB, a chunk)
_MAX_THREADS = min(8, os.cpu_count() or 1)  # chunks quantized in parallel (each holds ~3 chunk-sized temporaries)

try:  # optional: bf16 storage dtype (onnx and onnx-graphsurgeon already depend on it)
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised only where ml_dtypes is missing
    _ml_dtypes = None


# --------------------------------------------------------------------------------------------------------- dtypes
def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 value (round to nearest, ties to even), returned as float32. NaN stays NaN."""
    x = np.ascontiguousarray(x, np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


def act_numpy_dtype(act_dtype: str) -> np.dtype:
    """numpy storage dtype of an activation dtype name (bf16 needs ml_dtypes)."""
    if act_dtype == "fp16":
        return np.dtype(np.float16)
    if act_dtype == "fp32":
        return np.dtype(np.float32)
    if act_dtype == "bf16":
        if _ml_dtypes is None:
            raise QuantizationError("bf16 storage needs the ml_dtypes package: pip install ml_dtypes")
        return np.dtype(_ml_dtypes.bfloat16)
    raise QuantizationError(f"act_dtype must be one of {', '.join(ACT_DTYPES)}, got {act_dtype!r}")


def act_dtype_name(dtype) -> str | None:
    """'fp16' / 'bf16' / 'fp32' for a numpy dtype, None for anything else."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return "fp16"
    if dtype == np.float32:
        return "fp32"
    if dtype.name == "bfloat16":
        return "bf16"
    return None


def round_to_act(x: np.ndarray, act_dtype: str) -> np.ndarray:
    """Round float values to the activation dtype, returned as float32 (the values the kernels will see)."""
    x = np.asarray(x, np.float32)
    if act_dtype == "fp16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    if act_dtype == "bf16":
        return round_bf16(x)
    if act_dtype == "fp32":
        return x
    raise QuantizationError(f"act_dtype must be one of {', '.join(ACT_DTYPES)}, got {act_dtype!r}")


def to_act_storage(x: np.ndarray, act_dtype: str) -> np.ndarray:
    """Values already rounded to ``act_dtype`` (float32 array) -> an array of the activation storage dtype."""
    return np.asarray(x, np.float32).astype(act_numpy_dtype(act_dtype))


def _tiny(act_dtype: str) -> float:
    """Smallest positive normal of the scale dtype: replaces scales that rounded to zero."""
    return {"fp16": float(np.finfo(np.float16).tiny), "bf16": float(np.finfo(np.float32).tiny),
            "fp32": float(np.finfo(np.float32).tiny)}[act_dtype]


# ------------------------------------------------------------------------------------------------------ quantizer
@dataclass
class QuantizedWeight:
    """RTN result: ``u`` uint8 [K, N]; ``scales`` / ``zeros`` [K/G, N] float32 holding act-dtype-exact values."""

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


def check_weight(w: np.ndarray, group_size: int, name: str = "weight") -> None:
    """Raise QuantizationError naming ``name`` for a weight that cannot be quantized with ``group_size``."""
    if w.ndim != 2:
        raise QuantizationError(f"{name}: expected a 2-D [K, N] weight, got shape {tuple(w.shape)}")
    if group_size not in GROUP_SIZES:
        raise QuantizationError(f"{name}: group_size must be one of {GROUP_SIZES}, got {group_size}")
    k = w.shape[0]
    if group_size != -1 and k % group_size:
        raise QuantizationError(f"{name}: K={k} is not a multiple of group_size {group_size}; "
                                f"use a group size dividing K or -1 (per channel)")
    if not np.isfinite(w).all():
        bad = int(np.size(w) - np.count_nonzero(np.isfinite(w)))
        raise QuantizationError(f"{name}: weight contains {bad} NaN/Inf value(s); fix the model or --exclude the node")


def _round_scales(raw: np.ndarray, act_dtype: str, name: str) -> np.ndarray:
    s = round_to_act(raw, act_dtype)
    if not np.isfinite(s).all():
        raise QuantizationError(f"{name}: a group's scale {float(np.max(raw)):.4g} overflows {act_dtype}; "
                                f"the weight is too large for {act_dtype} activations")
    return np.where(s > 0, s, np.float32(_tiny(act_dtype)))


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
        s = _round_scales(amax * np.float32(r / qmax), act_dtype, name)
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
        s = _round_scales(span / np.float32(levels), act_dtype, name)
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
    """Quantize ``w[K, N]`` (any float dtype) with RTN and the per-group scale search; see the module docstring.

    ``clip_ratios=(1.0,)`` gives plain max-abs (symmetric) / min-max (asymmetric) RTN.
    """
    if bits not in (4, 8):
        raise QuantizationError(f"{name}: bits must be 4 or 8, got {bits}")
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

    cols = min(_COLUMN_CHUNK, max(128, (1 << 22) // max(k, 1)))

    def one_chunk(c0: int) -> None:  # writes disjoint column slices: safe from several threads
        c1 = min(n, c0 + cols)
        wg = np.ascontiguousarray(w[:, c0:c1], np.float32).reshape(k // g, g, c1 - c0)
        if asymmetric:
            uc, s, z, err = _search_asymmetric(wg, bits, act_dtype, ratios, name)
            zeros[:, c0:c1] = z
        else:
            q, s, err = _search_symmetric(wg, bits, act_dtype, ratios, name)
            uc = q + (1 << (bits - 1))
        u[:, c0:c1] = uc.reshape(k, c1 - c0).astype(np.uint8)
        scales[:, c0:c1] = s
        sums[c0 // cols] = (float(err.sum(dtype=np.float64)), float(np.square(wg).sum(dtype=np.float64)))

    chunks = range(0, n, cols)
    sums = [(0.0, 0.0)] * len(chunks)
    workers = min(len(chunks), _MAX_THREADS)
    if workers <= 1:
        for c0 in chunks:
            one_chunk(c0)
    else:  # numpy's ufuncs release the GIL: column chunks run in parallel
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            for f in [pool.submit(one_chunk, c0) for c0 in chunks]:
                f.result()
    return QuantizedWeight(u=u, scales=scales, zeros=zeros, bits=bits, group_size=group_size, act_dtype=act_dtype,
                           sq_error=sum(e for e, _ in sums), sq_norm=sum(w2 for _, w2 in sums))


# ---------------------------------------------------------------------------------------------------- public API
def _bits_of(algo: str) -> int:
    try:
        return ALGOS[algo]
    except KeyError:
        raise QuantizationError(f"algo must be one of {', '.join(ALGOS)}, got {algo!r}") from None


def weight_quantize(w: np.ndarray, algo: str = "weight_only_int8", group_size: int = -1, asymmetric: bool = False,
                    act_dtype: str = "fp16", layout: int = 1):
    """Quantize ``w[K, N]`` and pack it: returns ``(packed_int32 [N/I, K/2], scales [K/G, N], zeros or None)``.

    Scales (and zeros, integer values) are in the activation dtype (``fp16``/``bf16``; ``fp32`` for references).
    """
    bits = _bits_of(algo)
    qw = quantize_rtn(w, bits, group_size, asymmetric, act_dtype)
    packed = get_layout(layout).pack(qw.u, bits)
    zeros = None if qw.zeros is None else to_act_storage(qw.zeros, act_dtype)
    return packed, to_act_storage(qw.scales, act_dtype), zeros


def _packed_kn(packed: np.ndarray, bits: int, layout: int, k=None, n=None) -> tuple[int, int]:
    mod = get_layout(layout)
    inter = mod.interleave_factor(bits)
    k = 2 * packed.shape[1] if k is None else int(k)
    n = inter * packed.shape[0] if n is None else int(n)
    return k, n


def weight_dequantize(packed: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None = None, *, k: int | None = None,
                      n: int | None = None, algo: str = "weight_only_int8", group_size: int = -1,
                      layout: int = 1) -> np.ndarray:
    """float64 ``W[K, N] = (U - Z) * S`` from packed tensors (K, N default to what the packed shape implies)."""
    bits = _bits_of(algo)
    k, n = _packed_kn(packed, bits, layout, k, n)
    return get_layout(layout).dequantize_reference(packed, scales, zeros, k, n, bits, group_size)


def weight_only_linear(x: np.ndarray, packed: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None = None,
                       bias: np.ndarray | None = None, *, algo: str = "weight_only_int8", group_size: int = -1,
                       layout: int = 1) -> np.ndarray:
    """Numpy reference of ``Y = X @ W + bias``: float64 math, result in ``x``'s dtype. ``x`` is [..., K]."""
    w = weight_dequantize(packed, scales, zeros, algo=algo, group_size=group_size, layout=layout)
    x = np.asarray(x)
    if x.shape[-1] != w.shape[0]:
        raise QuantizationError(f"weight_only_linear: x has {x.shape[-1]} features, the weight expects K={w.shape[0]}")
    y = x.astype(np.float64) @ w
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return y.astype(x.dtype)
