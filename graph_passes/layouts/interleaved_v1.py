"""Layout version 1, ``interleaved_v1``: the packed weight read by the GEMV and mma.sync GEMM kernels.

The spec, with the reasons for each step, is ``docs/layouts.md``; this module is its executable form. All functions
are pure numpy and vectorized (a 4096 x 14336 INT4 matrix packs in a fraction of a second).
"""

from __future__ import annotations

import numpy as np

from graph_passes.layouts.errors import LayoutError

VERSION = 1
NAME = "interleaved_v1"
K_TILE = 64

# Step 2: in-block k permutation matching the mma.sync m16n8k16 B fragment (lane t owns k = 2(t%4) + {0,1,8,9}).
_PERM16 = np.array([0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15])
_PERM32 = np.concatenate([[2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9, 16 + 2 * t, 17 + 2 * t, 24 + 2 * t, 25 + 2 * t]
                          for t in range(4)])
# Step 3: nibble p of an INT4 word holds element ORDER4[p], so LOP3 magic conversions yield (e0,e1), (e2,e3), ...
_ORDER4 = np.array([0, 2, 4, 6, 1, 3, 5, 7])


def interleave_factor(bits: int) -> int:
    """Output channels sharing one 128-byte line: 2 for INT8, 4 for INT4."""
    return {8: 2, 4: 4}[bits]


def _k_permutation(bits: int) -> np.ndarray:
    return _PERM16 if bits == 8 else _PERM32


def check_shape(k: int, n: int, bits: int) -> None:
    """Raise LayoutError naming the constraint when (K, N) cannot be packed."""
    if bits not in (4, 8):
        raise LayoutError(f"{NAME}: bits must be 4 or 8, got {bits}")
    if k % K_TILE:
        raise LayoutError(f"{NAME}: K={k} is not a multiple of {K_TILE}")
    if n % interleave_factor(bits):
        raise LayoutError(f"{NAME}: N={n} is not a multiple of {interleave_factor(bits)} (INT{bits} interleave)")


def packed_shape(k: int, n: int, bits: int) -> tuple[int, int]:
    check_shape(k, n, bits)
    return n // interleave_factor(bits), k // 2


def unpacked_shape(packed_shape: tuple[int, ...], bits: int) -> tuple[int, int]:
    """(K, N) of the weight a packed tensor of ``packed_shape`` holds (inverse of :func:`packed_shape`)."""
    return 2 * packed_shape[1], interleave_factor(bits) * packed_shape[0]


def _storage_order(bits: int) -> np.ndarray:
    """Steps 2 + 3 as one in-block gather: storage slot j (nibble or byte order in the words) holds in-block k."""
    perm = _k_permutation(bits)
    if bits == 8:
        return perm
    return np.concatenate([perm[8 * w + _ORDER4] for w in range(perm.size // 8)])


def pack(u: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned quantized values ``u[K, N]`` (0 <= u < 2**bits) into int32 ``[N / I, K / 2]``."""
    if u.ndim != 2:
        raise LayoutError(f"{NAME}: expected a 2-D [K, N] array, got shape {u.shape}")
    if not np.issubdtype(u.dtype, np.integer):
        raise LayoutError(f"{NAME}: expected integer quantized values, got dtype {u.dtype} (round and cast first)")
    k, n = u.shape
    check_shape(k, n, bits)
    if u.size and (int(u.min()) < 0 or int(u.max()) >= 1 << bits):
        raise LayoutError(f"{NAME}: values must lie in [0, {1 << bits}) for INT{bits}")
    inter = interleave_factor(bits)
    order = _storage_order(bits)
    # Work in [K, N] orientation (row gathers are cheap) and transpose once, on bytes, at the end.
    a = u.astype(np.uint8, copy=False).reshape(k // order.size, order.size, n)[:, order, :]  # steps 2 + 3
    if bits == 4:  # two k per byte, low nibble first
        a = a[:, 0::2] | (a[:, 1::2] << 4)
    line_bytes = K_TILE * bits // 8
    a = a.reshape(k // K_TILE, line_bytes, n // inter, inter).transpose(2, 0, 3, 1)  # steps 1 + 4: [N/I, K/64, I, .]
    return np.ascontiguousarray(a).reshape(-1).view("<u4").view(np.int32).reshape(packed_shape(k, n, bits))


def unpack(packed: np.ndarray, k: int, n: int, bits: int) -> np.ndarray:
    """Exact inverse of :func:`pack`: int32 ``[N / I, K / 2]`` back to uint8 ``u[K, N]``."""
    expected = packed_shape(k, n, bits)
    if packed.shape != expected or packed.dtype != np.int32:
        raise LayoutError(f"{NAME}: packed weight for K={k}, N={n}, INT{bits} must be int32 {expected}, "
                          f"got {packed.dtype} {packed.shape}")
    inter = interleave_factor(bits)
    order = _storage_order(bits)
    line_bytes = K_TILE * bits // 8
    a = np.ascontiguousarray(packed).view(np.uint8).reshape(n // inter, k // K_TILE, inter, line_bytes)
    a = a.transpose(1, 3, 0, 2).reshape(k * bits // 8 // (order.size * bits // 8), order.size * bits // 8, n)
    if bits == 4:
        nib = np.empty((a.shape[0], order.size, n), np.uint8)
        nib[:, 0::2] = a & 0xF
        nib[:, 1::2] = a >> 4
        a = nib
    u = np.empty_like(a)
    u[:, order, :] = a
    return u.reshape(k, n)


def dequantize_reference(packed: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, k: int, n: int,
                         bits: int, group_size: int) -> np.ndarray:
    """Float64 ``W[K, N] = (U - Z) * S`` from packed tensors; ``zeros=None`` means symmetric (Z = 2**(bits-1))."""
    u = unpack(packed, k, n, bits).astype(np.float64)
    group = k if group_size == -1 else group_size
    s = np.repeat(np.asarray(scales, np.float64).reshape(-1, n), group, axis=0)
    z = (1 << (bits - 1)) if zeros is None else np.repeat(np.asarray(zeros, np.float64).reshape(-1, n), group, axis=0)
    return (u - z) * s
