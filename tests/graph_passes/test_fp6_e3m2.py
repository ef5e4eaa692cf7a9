"""FP6 E3M2 codec: every one of the 64 codes from the format's definition, rounding (ties to even, saturation),
and encode/decode round trips. The expected values are written from the definition, not from the codec."""

from __future__ import annotations

import numpy as np
import pytest

from graph_passes import fp6_e3m2 as F


def _by_definition(code: int) -> float:
    s, e, m = code >> 5, (code >> 2) & 7, code & 3
    mag = 2.0 ** -2 * m / 4 if e == 0 else 2.0 ** (e - 3) * (1 + m / 4)
    return -mag if s else mag


def test_all_64_codes_decode_by_definition():
    vals = F.decode(np.arange(64))
    for c in range(64):
        assert vals[c] == _by_definition(c), c
    assert np.isfinite(vals).all()  # no Inf / NaN codes
    assert vals.max() == 28.0 and vals.min() == -28.0
    np.testing.assert_array_equal(vals[:4], [0.0, 0.0625, 0.125, 0.1875])  # subnormals in steps of 0.0625
    assert vals[4] == 0.25  # smallest normal
    np.testing.assert_array_equal(vals[32:], -vals[:32])  # the sign bit only flips the sign
    assert len(set(np.abs(vals).tolist())) == 32


def test_encode_inverts_decode_on_every_code():
    codes = F.encode(F.decode(np.arange(64)))
    expected = np.arange(64)
    expected[32] = 0  # -0 encodes as +0
    np.testing.assert_array_equal(codes, expected)


def test_encode_is_nearest_with_ties_to_even():
    rng = np.random.default_rng()
    table = F.decode(np.arange(64))
    x = np.concatenate([rng.uniform(-28, 28, 20000), rng.uniform(-0.3, 0.3, 20000)]).astype(np.float32)
    got = F.decode(F.encode(x))
    best = np.abs(x.astype(np.float64)[:, None] - table[None, :]).min(axis=1)
    np.testing.assert_array_equal(np.abs(got - x), best)
    # Midpoints between neighbours go to the even code (mantissa LSB 0), which is one of the two neighbours.
    mags = np.unique(np.abs(table))
    for lo, hi in zip(mags[:-1], mags[1:]):
        for sign in (1.0, -1.0):
            c = int(F.encode(np.array([sign * (lo + hi) / 2]))[0])
            assert c % 2 == 0, (lo, hi, c)
            assert abs(F.decode(np.array([c]))[0]) in (lo, hi)


def test_saturates_and_refuses_non_finite():
    np.testing.assert_array_equal(F.decode(F.encode(np.array([29.0, 1e6, -31.0]))), [28.0, 28.0, -28.0])
    with pytest.raises(ValueError):
        F.encode(np.array([np.nan]))
    with pytest.raises(ValueError):
        F.encode(np.array([np.inf]))
    with pytest.raises(ValueError):
        F.decode(np.array([64]))


def test_tiny_values_round_to_zero_code():
    assert F.encode(np.array([0.03, -0.03, 0.0, -0.0])).tolist() == [0, 0, 0, 0]  # 0.03 < 0.03125 = half a step
    assert F.encode(np.array([0.032, -0.032])).tolist() == [1, 33]
