"""GPU tests of FP6 (a subset of tests/device/fp6_check.py); skipped with a reason without a GPU."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from trt_woq import kernels as K

torch = pytest.importorskip("torch", reason="GPU tests need torch (tests only; the library does not)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU visible", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "device"))
import fp6_check as check  # noqa: E402  (tests/device holds scripts, not a package)


def test_fp6_converters_exhaustive(rng, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("the converter test library is built with nvcc, which is not on the PATH")
    tally = check.Tally()
    check.test_converters(check.build_convert_lib(str(tmp_path)), tally, rng)
    assert tally.failed == 0 and tally.passed == 2


@pytest.mark.parametrize("m", [1, 3, 9, 16])
@pytest.mark.parametrize("k, group, act, bias", [(4224, 128, "fp16", False), (4160, -1, "bf16", True),
                                                 (4160, 32, "fp16", True)])
def test_fp6_gemv_odd_shape(built_library, rng, m, k, group, act, bias):
    lib = K.Kernels(built_library)
    tally = check.Tally()
    pr = check.Fp6Problem(m, k, 1028, group, act, bias, rng)
    sm = K.device_sm()
    cands = [c for c in range(lib.candidate_count()) if lib.supports(c, pr.params(pr.x), sm) == K.Status.OK]
    assert cands
    check.run_case(lib, pr, cands + [-1], tally)
    assert tally.failed == 0
