"""Layout v1 (interleaved_v1): round trips, the worked example of docs/layouts.md, refusals, and the mma-fragment
property that the kernels rely on. Every check is written from the spec in docs/layouts.md, not from the packer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_passes.layouts import LayoutError, get_layout, interleaved_v1 as L

GROUP_SIZES = (-1, 32, 64, 128, 256)


def _random_u(rng: np.random.Generator, k: int, n: int, bits: int) -> np.ndarray:
    return rng.integers(0, 1 << bits, size=(k, n), dtype=np.uint8)


def _inter(bits: int) -> int:
    return 2 if bits == 8 else 4


# ---------------------------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [8, 4])
def test_round_trip_seeded_sweep(bits):
    rng = np.random.default_rng()
    inter = _inter(bits)
    shapes = [(64, inter), (128, 3 * inter), (192, 5 * inter), (640, 17 * inter), (64 * 7, 26 * inter)]
    shapes += [(64 * int(rng.integers(1, 12)), inter * int(rng.integers(1, 40))) for _ in range(10)]
    for k, n in shapes:
        u = _random_u(rng, k, n, bits)
        packed = L.pack(u, bits)
        assert packed.dtype == np.int32
        assert packed.shape == (n // inter, k // 2) == L.packed_shape(k, n, bits)
        assert packed.flags.c_contiguous
        back = L.unpack(packed, k, n, bits)
        assert back.dtype == np.uint8 and back.shape == (k, n)
        np.testing.assert_array_equal(back, u, err_msg=f"INT{bits} round trip K={k} N={n}")


@settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from([8, 4]), k_tiles=st.integers(1, 10), n_units=st.integers(1, 24),
       seed=st.integers(0, 2**32 - 1))
def test_round_trip_property(bits, k_tiles, n_units, seed):
    k, n = 64 * k_tiles, _inter(bits) * n_units
    u = _random_u(np.random.default_rng(seed), k, n, bits)
    np.testing.assert_array_equal(L.unpack(L.pack(u, bits), k, n, bits), u)


@pytest.mark.parametrize("bits", [8, 4])
def test_pack_is_a_bijection_on_positions(bits):
    """Every (k, n) lands in its own storage slot: packing a one-hot matrix sets exactly one field."""
    k, n = 128, 2 * _inter(bits)
    rng = np.random.default_rng()
    for _ in range(20):
        kk, nn = int(rng.integers(0, k)), int(rng.integers(0, n))
        u = np.zeros((k, n), np.uint8)
        u[kk, nn] = (1 << bits) - 1
        raw = L.pack(u, bits).view(np.uint32)
        nonzero = np.flatnonzero(raw)
        assert nonzero.size == 1
        assert bin(int(raw.reshape(-1)[nonzero[0]])).count("1") == bits


@pytest.mark.parametrize("bits", [8, 4])
def test_extreme_values(bits):
    k, n = 128, 4 * _inter(bits)
    for value in (0, (1 << bits) - 1):
        u = np.full((k, n), value, np.uint8)
        np.testing.assert_array_equal(L.unpack(L.pack(u, bits), k, n, bits), u)
    u = np.full((k, n), (1 << bits) - 1, np.uint8)
    assert np.all(L.pack(u, bits).view(np.uint32) == 0xFFFFFFFF)


def test_packed_byte_count():
    """INT8 stores N*K bytes, INT4 N*K/2 (docs/layouts.md)."""
    k, n = 256, 8
    assert L.pack(np.zeros((k, n), np.uint8), 8).nbytes == n * k
    assert L.pack(np.zeros((k, n), np.uint8), 4).nbytes == n * k // 2


def test_registry():
    assert get_layout(1) is L
    with pytest.raises(LayoutError, match="unknown layout version 7"):
        get_layout(7)


# ---------------------------------------------------------------------------------------------------------------
# dequantize_reference over all group sizes, symmetric and asymmetric
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("asymmetric", [False, True])
def test_dequantize_reference(bits, group_size, asymmetric):
    rng = np.random.default_rng()
    k, n = 512, 6 * _inter(bits)
    g = k if group_size == -1 else group_size
    u = _random_u(rng, k, n, bits)
    scales = rng.uniform(0.01, 0.2, size=(k // g, n)).astype(np.float16)
    zeros = rng.integers(0, 1 << bits, size=(k // g, n)).astype(np.float16) if asymmetric else None
    w = L.dequantize_reference(L.pack(u, bits), scales, zeros, k, n, bits, group_size)
    assert w.dtype == np.float64 and w.shape == (k, n)
    # Element-by-element from the formula W[k, n] = (U[k, n] - Z[k // G, n]) * S[k // G, n].
    kk = np.arange(k)[:, None] // g
    nn = np.arange(n)[None, :]
    z = zeros.astype(np.float64)[kk, nn] if asymmetric else float(1 << (bits - 1))
    expected = (u.astype(np.float64) - z) * scales.astype(np.float64)[kk, nn]
    np.testing.assert_array_equal(w, expected)


# ---------------------------------------------------------------------------------------------------------------
# The worked example of docs/layouts.md and the mma.sync fragment property
# ---------------------------------------------------------------------------------------------------------------

def test_worked_example_word():
    k, n = 64, 4
    u = ((np.arange(k)[:, None] + np.arange(n)[None, :]) % 16).astype(np.uint8)
    packed = L.pack(u, 4)
    assert packed.shape == (1, 32)
    assert int(packed.view(np.uint32)[0, 0]) == 0x91918080


def _word_of(packed: np.ndarray, bits: int, n: int, k_block_start: int, j: int) -> int:
    """The 32-bit word that lane t (t % 4 == j, t // 4 == n within the tile) loads for the permutation block starting
    at k_block_start, located from the spec: packed row n // I, byte (k // 64)*64*I*bits/8 + (n % I)*64*bits/8 + ..."""
    inter = _inter(bits)
    line = 64 * bits // 8                   # bytes of one channel's 64 k
    block = 16 if bits == 8 else 32         # k per permutation block = 16 bytes either way
    byte = (k_block_start // 64) * line * inter + (n % inter) * line + (k_block_start % 64) // block * 16 + 4 * j
    return int(packed[n // inter].view(np.uint32)[byte // 4])


def _fragment_words(bits: int, n: int):
    """(u, column, k block start, j, word) for every lane word j of every k block of a fresh random K=256 x n
    packing."""
    k = 256
    u = _random_u(np.random.default_rng(), k, n, bits)
    packed = L.pack(u, bits)
    for col in range(n):
        for kb in range(0, k, 16 if bits == 8 else 32):
            for j in range(4):
                yield u, col, kb, j, _word_of(packed, bits, col, kb, j)


def test_mma_fragment_property_int8():
    """Lane t's word holds k = 2(t%4) + {0, 1, 8, 9} of its block, byte p = element p, so PRMT 0x7150 gives the half2
    (k, k+1) = (2j, 2j+1) and 0x7352 gives (2j+8, 2j+9): exactly the m16n8k16 B fragment registers."""
    for u, col, kb, j, word in _fragment_words(8, 6):
        got = [(word >> (8 * p)) & 0xFF for p in range(4)]
        want = [u[kb + 2 * j + d, col] for d in (0, 1, 8, 9)]
        assert got == want, (col, kb, j)


def test_mma_fragment_property_int4():
    """Lane t's word holds k = 2(t%4) + {0, 1, 8, 9} for two k16 steps (e0..e7 = 2j, 2j+1, 2j+8, 2j+9, 16+2j, ...),
    nibbles low->high e0 e2 e4 e6 e1 e3 e5 e7, so the LOP3 masks 0x000F000F, 0x00F000F0 and the same after >> 8
    yield the pairs (e0, e1), (e2, e3), (e4, e5), (e6, e7) in order."""
    for u, col, kb, j, word in _fragment_words(4, 8):
        want_k = [2 * j, 2 * j + 1, 2 * j + 8, 2 * j + 9, 16 + 2 * j, 17 + 2 * j, 24 + 2 * j, 25 + 2 * j]
        want = [int(u[kb + kk, col]) for kk in want_k]
        # What the kernel's masks extract, in the order it uses them.
        pairs = []
        for w in (word, word >> 8):
            lo = w & 0x000F000F
            hi = w & 0x00F000F0
            pairs += [(lo & 0xF, (lo >> 16) & 0xF), ((hi >> 4) & 0xF, (hi >> 20) & 0xF)]
        assert [v for pair in pairs for v in pair] == want, (col, kb, j)


# ---------------------------------------------------------------------------------------------------------------
# Refusals, each with a message naming the constraint
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("k", [32, 96, 100, 65])
def test_refuses_k_not_multiple_of_64(bits, k):
    with pytest.raises(LayoutError, match=rf"K={k} is not a multiple of 64"):
        L.pack(np.zeros((k, 8), np.uint8), bits)


@pytest.mark.parametrize("bits,n", [(8, 3), (8, 7), (4, 2), (4, 6), (4, 10)])
def test_refuses_n_not_multiple_of_interleave(bits, n):
    with pytest.raises(LayoutError, match=rf"N={n} is not a multiple of {_inter(bits)}"):
        L.pack(np.zeros((64, n), np.uint8), bits)


@pytest.mark.parametrize("bits", [8, 4])
def test_refuses_out_of_range_values(bits):
    u = np.zeros((64, 4), np.int32)
    u[5, 1] = 1 << bits
    with pytest.raises(LayoutError, match=rf"values must lie in \[0, {1 << bits}\)"):
        L.pack(u, bits)
    u[5, 1] = -1
    with pytest.raises(LayoutError, match="values must lie in"):
        L.pack(u, bits)


@pytest.mark.parametrize("bits", [2, 3, 16])
def test_refuses_other_bit_widths(bits):
    with pytest.raises(LayoutError, match=f"bits must be 4 or 8, got {bits}"):
        L.pack(np.zeros((64, 8), np.uint8), bits)


def test_refuses_non_2d():
    with pytest.raises(LayoutError, match=r"expected a 2-D \[K, N\] array"):
        L.pack(np.zeros((2, 64, 8), np.uint8), 4)


@pytest.mark.parametrize("bits", [8, 4])
def test_unpack_refuses_wrong_dtype_or_shape(bits):
    k, n = 128, 8
    packed = L.pack(np.zeros((k, n), np.uint8), bits)
    with pytest.raises(LayoutError, match="must be int32"):
        L.unpack(packed.view(np.uint32), k, n, bits)
    with pytest.raises(LayoutError, match="must be int32"):
        L.unpack(packed.astype(np.int64), k, n, bits)
    with pytest.raises(LayoutError, match="must be int32"):
        L.unpack(packed[:, :-1], k, n, bits)
    with pytest.raises(LayoutError, match="must be int32"):
        L.unpack(packed.T, k, n, bits)
    with pytest.raises(LayoutError, match="not a multiple of 64"):
        L.unpack(packed, k + 1, n, bits)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.bool_])
def test_refuses_non_integer_values(dtype):
    """A float array would be truncated silently by the uint8 cast; the packer asks for integers instead."""
    with pytest.raises(LayoutError, match=f"expected integer quantized values, got dtype {np.dtype(dtype)}"):
        L.pack(np.full((64, 4), 1, dtype), 4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.int64, np.uint16])
def test_accepts_any_integer_dtype(dtype):
    u = np.random.default_rng().integers(0, 16, size=(128, 8)).astype(dtype)
    np.testing.assert_array_equal(L.unpack(L.pack(u, 4), 128, 8, 4), u.astype(np.uint8))
