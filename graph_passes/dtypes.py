"""Activation dtypes (fp16, bf16; fp32 for references): names, numpy storage types, rounding. Pure numpy."""

from __future__ import annotations

import numpy as np

from graph_passes.errors import QuantizationError

ACT_DTYPES = ("fp16", "bf16", "fp32")  # fp32: reference only (the op and Q/DQ checks at float32 precision)

try:  # optional: bf16 storage dtype (onnx and onnx-graphsurgeon already depend on it)
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised only where ml_dtypes is missing
    _ml_dtypes = None


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


def tiny(act_dtype: str) -> float:
    """Smallest positive normal of the scale dtype: replaces scales that rounded to zero."""
    return {"fp16": float(np.finfo(np.float16).tiny), "bf16": float(np.finfo(np.float32).tiny),
            "fp32": float(np.finfo(np.float32).tiny)}[act_dtype]
