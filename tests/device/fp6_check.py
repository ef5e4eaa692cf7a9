"""Device test of FP6 (layout 2, fp6_split_v1): the bit-parallel converters on every code in every position.

Run on a GPU machine from the repository root (needs nvcc and torch):

    PYTHONPATH=python:. python3 tests/device/fp6_check.py [--seed S]

Converters: a matrix of FP6 codes in which each of the 16 element positions of a pair of 4-bit words takes all 64
codes is packed by graph_passes' fp6_split_v1.pack; tests/device/fp6_convert.cu (built here into a test-only
library) converts every word to FP16 and BF16 with trt_woq::fp6::convert_fp6_word; every value times 2^12 must equal
the float64 decode of its code (bit-exact). Outputs are poisoned with NaN before the launch.

Prints one line per failure and a final `N passed, N failed`; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from graph_passes import fp6_e3m2
from graph_passes.layouts import fp6_split_v1

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels_check import Tally  # noqa: E402  (a sibling script, not a package)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PERM32 = np.concatenate([[2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9, 16 + 2 * t, 17 + 2 * t, 24 + 2 * t, 25 + 2 * t]
                         for t in range(4)])


def build_convert_lib(workdir: str) -> ctypes.CDLL:
    so = os.path.join(workdir, "libfp6_convert.so")
    subprocess.run(["nvcc", "-std=c++17", "-O2", "-arch=native", "-shared", "-Xcompiler", "-fPIC",
                    "-I", os.path.join(ROOT, "plugins/kernels/src"), os.path.join(ROOT, "tests/device/fp6_convert.cu"),
                    "-o", so], check=True)
    lib = ctypes.CDLL(so)
    lib.fp6_convert.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    lib.fp6_convert.restype = ctypes.c_int
    return lib


def element_kn(row: np.ndarray, word: np.ndarray, e: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, n) of element e of 4-bit word `word` in packed row `row` (docs/layouts.md, layout 1 INT4 steps 2, 4)."""
    c = 8 * word + e
    kt, ni, kp = c // 256, (c // 64) % 4, c % 64
    return kt * 64 + (kp // 32) * 32 + PERM32[kp % 32], 4 * row + ni


def test_converters(lib: ctypes.CDLL, tally: Tally, rng: np.random.Generator) -> None:
    k, rows = 512, 64 * 4  # packed row r: channels 4r..4r+3; position (k, n % 4) takes code (base + r) % 64
    base = rng.integers(0, 64, size=(k, 4))
    codes = ((base[:, None, :] + np.arange(rows)[None, :, None]) % 64).reshape(k, 4 * rows).astype(np.uint8)
    words = fp6_split_v1.pack(codes)
    seg4 = np.ascontiguousarray(words[:, : k // 2]).reshape(-1)
    seg2 = np.ascontiguousarray(words[:, k // 2:]).reshape(-1)
    idx = np.arange(seg4.size)
    want = np.empty((seg4.size, 8))
    for e in range(8):
        kk, nn = element_kn(idx // (k // 2), idx % (k // 2), e)
        want[:, e] = fp6_e3m2.decode(codes[kk, nn])
    d4 = torch.from_numpy(seg4).cuda()
    d2 = torch.from_numpy(seg2).cuda()
    for bf16, dtype, name in ((0, torch.float16, "fp16"), (1, torch.bfloat16, "bf16")):
        out = torch.full((seg4.size, 8), float("nan"), dtype=dtype, device="cuda")
        err = lib.fp6_convert(bf16, d4.data_ptr(), d2.data_ptr(), out.data_ptr(), seg4.size)
        got = out.double().cpu().numpy() * 4096.0
        bad = np.argwhere(got != want)
        detail = f"cuda error {err}" if err else ""
        if bad.size:
            i, e = bad[0]
            detail += f" word {i} e{e}: got {got[i, e]}, want {want[i, e]} ({len(bad)} bad of {want.size})"
        tally.check(err == 0 and bad.size == 0, f"convert FP6->{name} ({want.size} values, 64 codes x 16 positions)",
                    detail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        test_converters(build_convert_lib(tmp), tally, rng)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
