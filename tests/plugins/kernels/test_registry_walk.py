"""Walks the C candidate registry of a built kernels library (CPU only; skipped without a build).

* every candidate has a name and info whose masks are non-empty on every axis and name only known enum values;
* every (weight format, activation mode, op, epilogue) combination a candidate claims is run on the device by the
  plugin conformance harness (tests/plugins/conformance/make_cases.py's synthetic matrix, each case with every
  tactic) or by tests/device/conv_check.py (every epilogue on every candidate, conv2d), so a new registry entry
  cannot land without its device cases;
* the registry refuses every combination outside a candidate's masks with UNSUPPORTED_OPTION, so no candidate gets a
  new format, op or epilogue by accident, and trt_woq_linear_candidate_serves (the plugin's tactic list) agrees;
* the shipped library exports exactly the functions of kernels.h; the test library adds only test entries.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trt_woq import kernels as K

ROOT = Path(__file__).resolve().parents[3]
HEADER = ROOT / "plugins" / "kernels" / "include" / "trt_woq" / "kernels.h"
TESTING_LIBRARY = "libtrt_woq_kernels_testing.so"
AXES = (K.WeightFormat, K.ActMode, K.Op, K.Epilogue)


def harness_combinations() -> set[tuple[str, str, str, str]]:
    """What the plugin harness's synthetic cases, tests/device/conv_check.py (epilogues, conv2d) and
    tests/device/w8a8_check.py (W8A8) run."""
    sys.path.insert(0, str(ROOT / "tests" / "plugins" / "conformance"))
    sys.path.insert(0, str(ROOT / "tests" / "device"))
    try:
        import conv_check
        import make_cases
        import w8a8_check
    finally:
        del sys.path[:2]
    return (make_cases.synthetic_combinations() | conv_check.covered_combinations()
            | w8a8_check.covered_combinations())


def claimed(serves: K.Serves):
    return itertools.product(serves.weight_formats, serves.act_modes, serves.ops, serves.epilogues)


def as_names(combo) -> tuple[str, ...]:
    return tuple(v.name.lower() for v in combo)


def test_every_candidate_declares_what_it_serves(built_library):
    lib = K.Kernels(built_library)
    assert lib.candidate_count() > 0
    for i in range(lib.candidate_count()):
        info = lib.candidate_info(i)
        assert info.name and info.name == lib.candidate_name(i)
        assert info.weight_formats and info.act_modes and info.ops and info.epilogues, info
        assert not info.unknown, f"{info.name}: mask bits of no known enum value {info.unknown}"
    with pytest.raises(K.KernelError):
        lib.candidate_info(lib.candidate_count())


def test_every_claimed_combination_has_device_cases(built_library):
    lib = K.Kernels(built_library)
    covered = harness_combinations()
    missing = {}
    for i in range(lib.candidate_count()):
        info = lib.candidate_info(i)
        for combo in claimed(info):
            if as_names(combo) not in covered:
                missing.setdefault(as_names(combo), []).append(info.name)
    assert not missing, ("combinations claimed by candidates without a device case in "
                         f"tests/plugins/conformance/make_cases.py SYNTHETIC_CONFIGS, "
                         f"tests/device/conv_check.py or tests/device/w8a8_check.py: {missing}")


def valid_params(fmt: K.WeightFormat, mode: K.ActMode, op: K.Op, epilogue: K.Epilogue) -> K.LinearParams:
    """Sizes and options that pass the registry's common checks for this combination (a 3x3 conv over a 3x3 input
    is one output pixel: M = 1, K = 64 * 9)."""
    conv = K.ConvGeometry(batch=1, in_channels=64, in_h=3, in_w=3, kernel_h=3, kernel_w=3, stride_h=1, stride_w=1,
                          dilation_h=1, dilation_w=1, out_h=1, out_w=1)
    return K.make_params(m=1, n=256, k=576, weight_format=fmt, group_size=64, act_mode=mode, op=op, conv=conv,
                         epilogue=epilogue, clip_min=0.0, clip_max=6.0)


def test_combinations_outside_the_masks_are_refused(built_library):
    lib = K.Kernels(built_library)
    for i in range(lib.candidate_count()):
        info = lib.candidate_info(i)
        served = set(claimed(info))
        for combo in itertools.product(*AXES):
            if combo in served:
                continue
            status = lib.supports(i, valid_params(*combo), sm=90)
            assert status == K.Status.UNSUPPORTED_OPTION, f"{info.name} with {as_names(combo)}: {status.name}"
            assert lib.serves(i, valid_params(*combo)) == K.Status.UNSUPPORTED_OPTION, (info.name, as_names(combo))
        for combo in served:
            assert lib.serves(i, valid_params(*combo)) == K.Status.OK, (info.name, as_names(combo))
    unserved = [c for c in itertools.product(*AXES)
                if not any(c in set(claimed(lib.candidate_info(i))) for i in range(lib.candidate_count()))]
    for combo in unserved:
        assert lib.dispatch(valid_params(*combo), sm=90) == -1, as_names(combo)


def header_functions() -> set[str]:
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    return set(re.findall(r"\b(trt_woq_\w+)\s*\(", text))


def exported_functions(library: Path) -> set[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def test_shipped_library_exports_only_the_public_abi(built_library):
    assert exported_functions(built_library) == header_functions()


def test_test_library_adds_only_test_entries(built_library):
    testing = built_library.with_name(TESTING_LIBRARY)
    if not testing.is_file():
        pytest.skip(f"{TESTING_LIBRARY} is not built beside {built_library} "
                    "(cmake --build BUILD --target trt_woq_kernels_testing)")
    extra = exported_functions(testing) - header_functions()
    assert header_functions() <= exported_functions(testing)
    assert extra and all(name.startswith(("trt_woq_testing_", "trt_woq_gemm_")) for name in extra), extra
