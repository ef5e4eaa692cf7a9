"""GPU tests of the kernels (a subset of tests/device/kernels_check.py); skipped with a reason without a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trt_woq import kernels as K

torch = pytest.importorskip("torch", reason="GPU tests need torch (tests only; the library does not)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU visible", allow_module_level=True)

_spec = importlib.util.spec_from_file_location(
    "kernels_check", Path(__file__).resolve().parents[2] / "device" / "kernels_check.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


@pytest.fixture
def lib(built_library):
    return K.Kernels(built_library)


def test_converters_exhaustive(lib, rng):
    testing = Path(check.testing_library(lib))
    if not testing.is_file():
        pytest.skip(f"the test library {testing} is not built (cmake --build BUILD --target trt_woq_kernels_testing, "
                    "or set TRT_WOQ_KERNELS_TESTING_PATH)")
    tally = check.Tally()
    check.test_converters(lib, tally, rng)
    assert tally.failed == 0 and tally.passed == 4


@pytest.mark.parametrize("m", [1, 3, 9, 16])
# K is not a power of two and, where the group allows, not a multiple of 128 (4160 = 65 x 64; 4224 = 33 x 128).
@pytest.mark.parametrize("k, bits, group, act, zeros, bias", [
    (4224, 4, 128, "fp16", False, False), (4160, 4, 64, "bf16", True, True), (4160, 8, -1, "fp16", False, True),
    (4160, 8, 32, "bf16", True, False)])
def test_gemv_odd_shape(lib, rng, m, k, bits, group, act, zeros, bias):
    tally = check.Tally()
    pr = check.Problem(m, k, 1028, bits, group, act, zeros, bias, rng)
    sm = K.device_sm()
    cands = [c for c in range(lib.candidate_count()) if lib.supports(c, pr.params(pr.x), sm) == K.Status.OK]
    assert cands
    check.run_case(lib, pr, cands + [-1], tally)
    assert tally.failed == 0


def test_refusals(lib):
    tally = check.Tally()
    check.test_refusals(lib, tally)
    assert tally.failed == 0
