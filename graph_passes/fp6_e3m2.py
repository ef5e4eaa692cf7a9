"""FP6 E3M2, the 6-bit float of FP6-LLM / ZeroQuant(4+2): encode, decode, round. Pure numpy.

1 sign bit, 3 exponent bits with bias 3, 2 mantissa bits, no Inf or NaN. A code ``c`` (0..63) is ``s eee mm`` from
bit 5 down to bit 0 and stands for

    eee = 0:   (-1)^s * 2^-2 * mm / 4                 (subnormals 0, 0.0625, 0.125, 0.1875)
    eee > 0:   (-1)^s * 2^(eee - 3) * (1 + mm / 4)    (normals 0.25 ... 28)

Encoding rounds to the nearest representable value, ties to the even code (mantissa LSB 0), saturates at +-28, and
writes zero as code 0. Bad input (codes outside 0..63, non-finite values) raises ValueError: the quantizer checks
weights before they get here, and the layouts import this module below ``graph_passes.errors``.
"""

from __future__ import annotations

import numpy as np

BITS = 6
FP6_MAX = 28.0
_SUBNORMAL_STEP = 0.0625  # 2^-2 / 4
_MIN_NORMAL = 0.25


def decode(codes: np.ndarray) -> np.ndarray:
    """FP6 E3M2 codes (integers 0..63) -> float64 values."""
    c = np.asarray(codes).astype(np.int64)
    if c.size and (c.min() < 0 or c.max() > 63):
        raise ValueError("fp6 decode: codes must lie in [0, 64)")
    exp = (c >> 2) & 7
    man = (c & 3).astype(np.float64)
    mag = np.where(exp == 0, man * _SUBNORMAL_STEP, np.ldexp(1.0 + man / 4.0, exp - 3))
    return np.where(c & 32, -mag, mag)


def round_magnitude(mag: np.ndarray) -> np.ndarray:
    """Non-negative finite float32 values -> the nearest FP6 E3M2 magnitude (float32), ties to even, saturating at 28.

    Normals round the float32 significand to 2 bits in the integer domain (add 2^20 - 1 plus the kept LSB, clear the
    low 21 bits); below 0.25 the step is the subnormal 0.0625.
    """
    mag = np.minimum(mag, np.float32(FP6_MAX), dtype=np.float32)
    bits = mag.view(np.uint32)
    out = (bits >> 21) & np.uint32(1)
    out += bits
    out += np.uint32(0xFFFFF)
    out &= np.uint32(0xFFE00000)
    out = out.view(np.float32)
    small = mag < _MIN_NORMAL
    out[small] = np.rint(mag[small] * np.float32(16.0)) * np.float32(_SUBNORMAL_STEP)
    return out


def round_fp6(x: np.ndarray) -> np.ndarray:
    """Float values -> the nearest FP6 E3M2 value as float32 (see :func:`round_magnitude`); zeros keep no sign."""
    x = np.asarray(x, np.float32)
    if not np.isfinite(x).all():
        raise ValueError("fp6: values must be finite")
    val = round_magnitude(np.abs(x))
    return np.where(x < 0, -val, val) + np.float32(0.0)  # + 0.0 turns -0.0 into +0.0


def encode(x: np.ndarray) -> np.ndarray:
    """Float values -> uint8 FP6 E3M2 codes of :func:`round_fp6` (anything rounding to zero is code 0)."""
    val = round_fp6(x)
    mag = np.abs(val)
    bits = mag.view(np.uint32).astype(np.int64)
    normal = (((bits >> 23) - 127 + 3) << 2) | ((bits >> 21) & 3)
    code = np.where(mag < _MIN_NORMAL, np.rint(mag * 16.0).astype(np.int64), normal)
    return (code | ((val < 0).astype(np.int64) << 5)).astype(np.uint8)


def dequantize(codes: np.ndarray, scales: np.ndarray, group_size: int) -> np.ndarray:
    """float64 ``W[K, N] = decode(C) * S`` with ``S`` [K/G, N] repeated along K."""
    k, n = codes.shape
    g = k if group_size == -1 else group_size
    return decode(codes) * np.repeat(np.asarray(scales, np.float64).reshape(-1, n), g, axis=0)
