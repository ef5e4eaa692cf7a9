"""Layout v2 (fp6_split_v1): round trips on odd shapes, the worked example of docs/layouts.md, refusals, and a numpy
model of the device converter (plugins/kernels/src/converters_fp6.cuh) run on every code in every position. The
element positions are written from the spec in docs/layouts.md, not taken from the packer."""

from __future__ import annotations

import numpy as np
import pytest

from graph_passes import fp6_e3m2 as F
from graph_passes.layouts import LayoutError, get_layout, fp6_split_v1 as L

PERM32 = np.concatenate([[2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9, 16 + 2 * t, 17 + 2 * t, 24 + 2 * t, 25 + 2 * t]
                         for t in range(4)])
ORDER4 = [0, 2, 4, 6, 1, 3, 5, 7]


def _codes(rng, k, n):
    return rng.integers(0, 64, size=(k, n), dtype=np.uint8)


def _element_kn(r: int, w: int, e: int) -> tuple[int, int]:
    """(k, n) of element e (0..7) of 4-bit word w in packed row r: layout 1 INT4, steps 2 and 4 of the spec."""
    c = 8 * w + e
    kt, ni, kp = c // 256, (c // 64) % 4, c % 64
    return kt * 64 + (kp // 32) * 32 + int(PERM32[kp % 32]), 4 * r + ni


def test_round_trip_odd_shapes():
    rng = np.random.default_rng()
    shapes = [(64, 4), (128, 12), (192, 20), (640, 68), (64 * 7, 4 * 26)]
    shapes += [(64 * int(rng.integers(1, 12)), 4 * int(rng.integers(1, 40))) for _ in range(10)]
    for k, n in shapes:
        c = _codes(rng, k, n)
        packed = L.pack(c)
        assert packed.dtype == np.int32 and packed.shape == (n // 4, 3 * k // 4) == L.packed_shape(k, n)
        np.testing.assert_array_equal(L.unpack(packed, k, n), c, err_msg=f"K={k} N={n}")


def test_registered_as_version_2():
    assert get_layout(2) is L and L.VERSION == 2
    assert L.unpacked_shape(L.packed_shape(320, 12)) == (320, 12)


def test_four_bit_words_are_layout_1_int4():
    rng = np.random.default_rng()
    k, n = 256, 12
    c = _codes(rng, k, n)
    np.testing.assert_array_equal(L.pack(c)[:, : k // 2], get_layout(1).pack(c & 0xF, 4))


def test_two_bit_positions_tile_the_word():
    pos = np.concatenate([L._S_POS.ravel(), L._E2_POS.ravel()])
    assert sorted(pos.tolist()) == list(range(32))


def test_worked_example():
    """docs/layouts.md: K = 64, N = 4, C[k, n] = (7 k + n) % 64."""
    k, n = 64, 4
    c = np.fromfunction(lambda kk, nn: (7 * kk + nn) % 64, (k, n), dtype=np.int64).astype(np.uint8)
    words = L.pack(c).view(np.uint32)
    assert words.shape == (1, 48)
    assert [hex(x) for x in words[0, :2]] == ["0xf7f78080", "0xd5d56e6e"]
    assert hex(words[0, 32]) == "0x226d2b7d"


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    x = x.astype(np.uint64)
    return ((x << np.uint64(r)) | (x >> np.uint64((32 - r) % 32 if r else 0))) & np.uint64(0xFFFFFFFF) if r else x


def _convert_fp16(seg4: np.ndarray, seg2: np.ndarray, h: int) -> list[np.ndarray]:
    """numpy model of trt_woq::fp6::convert_fp6_word<half, h>: 4 uint32 pairs per word, value * 2^-12 in FP16."""
    seg4 = seg4.astype(np.uint64)
    out = []
    for i in range(4):
        nib = (seg4 << np.uint64(8 - 4 * i)) if i < 2 else (seg4 >> np.uint64(4 * i - 8))
        sign_e2 = _rotl(seg2, (6 * (4 * h + i)) % 32) & np.uint64(0x90009000)
        out.append(((nib & np.uint64(0x0F000F00)) | sign_e2).astype(np.uint32))
    return out


def test_device_converter_model_on_every_code_in_every_position():
    """Each of the 16 element positions of a pair of 4-bit words takes all 64 codes (one per packed row); the
    converter's FP16 pairs, times 2^12, are the decoded codes exactly."""
    rng = np.random.default_rng()
    k, rows = 256, 64
    base = rng.integers(0, 64, size=(k, 4))
    c = ((base[:, None, :] + np.arange(rows)[None, :, None]) % 64).reshape(k, 4 * rows).astype(np.uint8)
    words = L.pack(c).view(np.uint32)
    seg4s, seg2s = words[:, : k // 2], words[:, k // 2:]
    expected = F.decode(c)
    for w in range(k // 2):
        pairs = _convert_fp16(seg4s[:, w], seg2s[:, w // 2], w % 2)
        for i, pr in enumerate(pairs):
            for half, e in ((0, 2 * i), (1, 2 * i + 1)):
                got = ((pr >> np.uint32(16 * half)) & np.uint32(0xFFFF)).astype(np.uint16).view(np.float16)
                kk, n0 = _element_kn(0, w, e)
                want = expected[kk, n0::4]  # packed row r holds channels 4 r + n0 % 4
                np.testing.assert_array_equal(got.astype(np.float64) * 4096.0, want, err_msg=f"word {w} e{e}")


def test_refusals():
    rng = np.random.default_rng()
    with pytest.raises(LayoutError, match="multiple of 64"):
        L.pack(_codes(rng, 96, 4))
    with pytest.raises(LayoutError, match="multiple of 4"):
        L.pack(_codes(rng, 64, 6))
    with pytest.raises(LayoutError, match=r"\[0, 64\)"):
        L.pack(np.full((64, 4), 64, np.uint8))
    with pytest.raises(LayoutError, match="integer"):
        L.pack(np.zeros((64, 4), np.float32))
    with pytest.raises(LayoutError, match="bits 6"):
        L.pack(_codes(rng, 64, 4), 4)
    with pytest.raises(LayoutError, match="int32"):
        L.unpack(np.zeros((1, 32), np.int32), 64, 4)
    with pytest.raises(LayoutError, match="zero points"):
        L.dequantize_reference(L.pack(_codes(rng, 64, 4)), np.ones((1, 4)), np.ones((1, 4)), 64, 4, 6, -1)


@pytest.mark.parametrize("group_size", [-1, 32, 64, 128])
def test_dequantize_reference_groups(group_size):
    """K = 192 (not a multiple of the kernels' 128-k chunk) wherever the group size divides it."""
    rng = np.random.default_rng()
    k, n = (384 if group_size == 128 else 192), 20
    c = _codes(rng, k, n)
    g = k if group_size == -1 else group_size
    s = rng.uniform(0.01, 2.0, size=(k // g, n))
    got = L.dequantize_reference(L.pack(c), s, None, k, n, 6, group_size)
    want = np.array([[F.decode(np.array([c[kk, nn]]))[0] * s[kk // g, nn] for nn in range(n)] for kk in range(k)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["pack", "unpack"])
def test_pack_and_unpack_memory_is_bounded_by_a_block(monkeypatch, op):
    """The vectorized packer widens every code to 8-byte words (~40 bytes of temporaries per weight: 5 GB for a
    4096 x 32000 lm_head); it works on blocks of columns of at most BLOCK_ELEMENTS weights, so the peak stays near the
    codes and the packed tensor. Blocks of a few columns, with N not a multiple of the block, give the same bytes."""
    import tracemalloc

    monkeypatch.setattr(L, "BLOCK_ELEMENTS", 512 * 12, raising=False)
    k, n = 512, 4 * 250
    c = _codes(np.random.default_rng(3), k, n)
    packed = L.pack(c) if op == "unpack" else None
    tracemalloc.start()
    try:
        out = L.pack(c) if op == "pack" else L.unpack(packed, k, n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * c.nbytes, f"{op}: peak {peak} bytes of temporaries for {c.nbytes} bytes of codes"
    if op == "pack":
        monkeypatch.setattr(L, "BLOCK_ELEMENTS", 1 << 30)
        np.testing.assert_array_equal(out, L.pack(c))
    else:
        np.testing.assert_array_equal(out, c)
