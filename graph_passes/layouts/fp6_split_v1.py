"""Layout version 2, ``fp6_split_v1``: FP6 E3M2 codes split into a 4-bit and a 2-bit segment array.

The spec, with the reasons for each choice, is ``docs/layouts.md``; this module is its executable form. The 4-bit
segment (code bits 3..0: ``e1 e0 m1 m0``) of every weight is packed exactly as ``interleaved_v1`` packs INT4, so
kernels address it as they address INT4; the 2-bit segment (code bits 5..4: ``s e2``) follows the same positions at
half the bytes, arranged inside each 32-bit word so that one funnel shift and one mask put both bits of a pair of
weights where an FP16 needs them (``plugins/kernels/src/converters.cuh``). Pure numpy, vectorized.
"""

from __future__ import annotations

import numpy as np

from graph_passes.fp6_e3m2 import dequantize
from graph_passes.layouts import interleaved_v1
from graph_passes.layouts.errors import LayoutError

VERSION = 2
NAME = "fp6_split_v1"
BITS = 6
K_TILE = 64
INTERLEAVE = 4  # output channels per packed row, as INT4 in layout 1
BLOCK_ELEMENTS = 1 << 20  # pack / unpack this many weights at a time (~40 bytes of temporaries each)


def _two_bit_slots() -> tuple[np.ndarray, np.ndarray]:
    """Bit positions of the 2-bit segments inside a 2-bit word, indexed [h, e] for H word h in {0, 1} of the pair of
    4-bit words the 2-bit word serves and element e = 0..7 of that 4-bit word; returns (position of s, position of e2).

    Pair i = (e_2i, e_2i+1) of 4-bit word h is slot j = 4h + i; the converter rotates the word left by r_j = 6j mod 32
    and keeps bits 15 / 12 (s / e2 of e_2i) and 31 / 28 (of e_2i+1): the sources are those positions minus r_j, mod 32.
    The 32 positions are distinct because 3 is invertible mod 32 (tests check it)."""
    s_pos = np.empty((2, 8), np.int64)
    for h in range(2):
        for i in range(4):
            r = (6 * (4 * h + i)) % 32
            s_pos[h, 2 * i] = (15 - r) % 32
            s_pos[h, 2 * i + 1] = (31 - r) % 32
    return s_pos, (s_pos - 3) % 32


_S_POS, _E2_POS = _two_bit_slots()
ROTATIONS = tuple((6 * j) % 32 for j in range(8))


def interleave_factor(bits: int = BITS) -> int:
    """Output channels sharing one packed row (as INT4 in layout 1)."""
    return INTERLEAVE


def check_shape(k: int, n: int, bits: int = BITS) -> None:
    """Raise LayoutError naming the constraint when (K, N) cannot be packed."""
    if bits != BITS:
        raise LayoutError(f"{NAME}: holds FP6 (bits 6) only, got bits {bits}")
    if k % K_TILE:
        raise LayoutError(f"{NAME}: K={k} is not a multiple of {K_TILE}")
    if n % INTERLEAVE:
        raise LayoutError(f"{NAME}: N={n} is not a multiple of {INTERLEAVE} (FP6 interleave)")


def packed_shape(k: int, n: int, bits: int = BITS) -> tuple[int, int]:
    """int32 ``[N / 4, 3 K / 4]``: per packed row, K / 2 words of 4-bit segments then K / 4 words of 2-bit ones."""
    check_shape(k, n, bits)
    return n // INTERLEAVE, 3 * k // 4


def unpacked_shape(packed_shape: tuple[int, ...], bits: int = BITS) -> tuple[int, int]:
    """(K, N) of the weight a packed tensor of ``packed_shape`` holds (inverse of :func:`packed_shape`)."""
    return 4 * packed_shape[1] // 3, INTERLEAVE * packed_shape[0]


def _check_codes(codes: np.ndarray) -> tuple[int, int]:
    if codes.ndim != 2:
        raise LayoutError(f"{NAME}: expected a 2-D [K, N] array of FP6 codes, got shape {codes.shape}")
    if not np.issubdtype(codes.dtype, np.integer):
        raise LayoutError(f"{NAME}: expected integer FP6 codes, got dtype {codes.dtype} (encode first)")
    k, n = codes.shape
    check_shape(k, n)
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) > 63):
        raise LayoutError(f"{NAME}: FP6 codes must lie in [0, 64)")
    return k, n


def pack(codes: np.ndarray, bits: int = BITS) -> np.ndarray:
    """Pack FP6 codes ``codes[K, N]`` (0..63) into int32 ``[N / 4, 3 K / 4]``."""
    if bits != BITS:
        raise LayoutError(f"{NAME}: holds FP6 (bits 6) only, got bits {bits}")
    k, n = _check_codes(codes)
    codes = codes.astype(np.uint8, copy=False)
    out = np.empty(packed_shape(k, n), np.int32)
    for c0, c1 in _column_blocks(k, n):  # packed rows hold INTERLEAVE whole columns: blocks are independent
        out[c0 // INTERLEAVE:c1 // INTERLEAVE] = _pack_block(np.ascontiguousarray(codes[:, c0:c1]))
    return out


def _column_blocks(k: int, n: int) -> list[tuple[int, int]]:
    """Column ranges of about BLOCK_ELEMENTS weights (whole packed rows) covering ``[0, n)``."""
    cols = max(INTERLEAVE, BLOCK_ELEMENTS // max(k, 1) // INTERLEAVE * INTERLEAVE)
    return [(c0, min(n, c0 + cols)) for c0 in range(0, n, cols)]


def _pack_block(codes: np.ndarray) -> np.ndarray:
    k, n = codes.shape
    low = interleaved_v1.pack(codes & 0xF, 4)  # [N/4, K/2]: the 4-bit words, layout 1 INT4
    # The 2-bit words follow the same element positions: recover each 4-bit word's 8 elements in word order e0..e7
    # from the INT4 nibbles (nibble p holds e_order4[p]), so the 2-bit segments land beside the same positions.
    hi = interleaved_v1.pack(codes >> 4, 4)
    nib = np.stack([(hi.view(np.uint32) >> np.uint32(4 * p)) & np.uint32(0xF) for p in range(8)], axis=-1)
    elems = np.empty_like(nib)
    elems[..., interleaved_v1._ORDER4] = nib  # [N/4, K/2, 8]: element e of each 4-bit word
    pairs = elems.reshape(n // INTERLEAVE, k // 4, 2, 8).astype(np.uint64)  # word v serves 4-bit words 2v, 2v + 1
    s_bits = (pairs >> np.uint64(1)) << _S_POS.astype(np.uint64)
    e2_bits = (pairs & np.uint64(1)) << _E2_POS.astype(np.uint64)
    words = (s_bits | e2_bits).sum(axis=(-2, -1), dtype=np.uint64).astype(np.uint32)
    return np.concatenate([low, words.view(np.int32)], axis=1)


def unpack(packed: np.ndarray, k: int, n: int, bits: int = BITS) -> np.ndarray:
    """Exact inverse of :func:`pack`: int32 ``[N / 4, 3 K / 4]`` back to uint8 codes ``[K, N]``."""
    expected = packed_shape(k, n, bits)
    if packed.shape != expected or packed.dtype != np.int32:
        raise LayoutError(f"{NAME}: packed weight for K={k}, N={n}, FP6 must be int32 {expected}, "
                          f"got {packed.dtype} {packed.shape}")
    out = np.empty((k, n), np.uint8)
    for c0, c1 in _column_blocks(k, n):
        out[:, c0:c1] = _unpack_block(packed[c0 // INTERLEAVE:c1 // INTERLEAVE], k, c1 - c0)
    return out


def _unpack_block(packed: np.ndarray, k: int, n: int) -> np.ndarray:
    low = np.ascontiguousarray(packed[:, : k // 2])
    words = np.ascontiguousarray(packed[:, k // 2:]).view(np.uint32).astype(np.uint64)[..., None, None]
    s = (words >> _S_POS.astype(np.uint64)) & np.uint64(1)
    e2 = (words >> _E2_POS.astype(np.uint64)) & np.uint64(1)
    elems = ((s << np.uint64(1)) | e2).astype(np.uint32).reshape(n // INTERLEAVE, k // 2, 8)
    nib = elems[..., interleaved_v1._ORDER4]
    hi = (nib << (np.uint32(4) * np.arange(8, dtype=np.uint32))).sum(axis=-1, dtype=np.uint32)
    top = interleaved_v1.unpack(np.ascontiguousarray(hi).view(np.int32), k, n, 4)
    return (top << 4) | interleaved_v1.unpack(low, k, n, 4)


def dequantize_reference(packed: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, k: int, n: int,
                         bits: int, group_size: int) -> np.ndarray:
    """Float64 ``W[K, N] = decode(C) * S`` from the packed tensors (FP6 has no zero points: ``zeros`` must be None)."""
    if zeros is not None:
        raise LayoutError(f"{NAME}: FP6 is symmetric; zero points are not part of the format")
    return dequantize(unpack(packed, k, n, bits), scales, group_size)
