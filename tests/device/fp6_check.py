"""Device test of FP6 (layout 2, fp6_split_v1): the bit-parallel converters and the GEMV through the C ABI.

Run on a GPU machine from the repository root (needs nvcc, torch and the kernels library):

    TRT_WOQ_KERNELS_PATH=build/plugins/kernels/libtrt_woq_kernels.so PYTHONPATH=python:. \\
        python3 tests/device/fp6_check.py [--quick] [--seed S]

Converters: a matrix of FP6 codes in which each of the 16 element positions of a pair of 4-bit words takes all 64
codes is packed by graph_passes' fp6_split_v1.pack; tests/device/fp6_convert.cu (built here into a test-only
library) converts every word to FP16 and BF16 with trt_woq::fp6::convert_fp6_word; every value times 2^12 must equal
the float64 decode of its code (bit-exact). Outputs are poisoned with NaN before the launch.

GEMV: every FP6 candidate and the dispatch, M in {1, 2, 3, 7, 8, 9, 15, 16}; an LLM shape and odd ones (K = 4160
leaves half a 128-k chunk, N = 1028 a partial tile, K = 192 / N = 12 and K = 64 / N = 4 the smallest); per channel,
g128 (g64 where 128 does not divide K), g32; FP16 and BF16; bias on and off. Fresh random codes (all 64 values) and
signed scales packed by fp6_split_v1.pack; the reference is float64 X @ (decode(C) * S) + bias; outputs are poisoned;
the tolerance is kernels_check's. M = 17 and 40 run on the GEMM candidates (tests/device/gemm_check.py --bits 6
sweeps them). Refusals: zero points, layout 1.

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
from kernels_check import DTYPES, Tally, run_case  # noqa: E402  (a sibling script, not a package)

from trt_woq import kernels as K  # noqa: E402

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


class Fp6Problem:
    """(reference, packed, scales, bias, x) built together; the reference never looks at the packed words."""

    def __init__(self, m, k, n, group, act, bias, rng):
        self.m, self.k, self.n, self.group, self.act = m, k, n, group, act
        dtype = DTYPES[act]
        g = k if group == -1 else group
        codes = rng.integers(0, 64, size=(k, n), dtype=np.uint8)
        self.packed = torch.from_numpy(fp6_split_v1.pack(codes)).cuda()
        s = rng.uniform(0.5, 1.5, size=(k // g, n)) * rng.choice([-1.0, 1.0], size=(k // g, n)) / (28 * 8)
        self.scales = torch.from_numpy(s).to(dtype).cuda()
        self.bias = torch.from_numpy(rng.standard_normal(n)).to(dtype).cuda() if bias else None
        self.x = torch.from_numpy(rng.standard_normal((m, k))).to(dtype).cuda()
        w64 = torch.from_numpy(fp6_e3m2.decode(codes)).cuda() * self.scales.double().repeat_interleave(g, dim=0)
        self.ref = self.x.double() @ w64
        if bias:
            self.ref += self.bias.double()

    def label(self) -> str:
        bias = " bias" if self.bias is not None else ""
        return f"m={self.m} k={self.k} n={self.n} FP6 g{self.group} {self.act}{bias}"

    def params(self, out, **kw) -> K.LinearParams:
        args = dict(m=self.m, n=self.n, k=self.k, weight_format="fp6_e3m2", group_size=self.group, act=self.act,
                    x=self.x.data_ptr(), packed_weight=self.packed.data_ptr(), scales=self.scales.data_ptr(),
                    bias=self.bias.data_ptr() if self.bias is not None else None, output=out.data_ptr())
        args.update(kw)
        return K.make_params(**args)


def gemv_cases(quick: bool):
    shapes = [(4160, 1028), (192, 12), (64, 4)] + ([] if quick else [(4096, 4096)])
    cases = []
    for m in ((1, 9, 16) if quick else (1, 2, 3, 7, 8, 9, 15, 16)):
        for k, n in shapes:
            g128 = 128 if k % 128 == 0 else 64
            cases += [(m, k, n, -1, "fp16", True), (m, k, n, g128, "bf16", False), (m, k, n, 32, "fp16", False),
                      (m, k, n, -1, "bf16", True), (m, k, n, g128, "fp16", True)]
    cases += [(17, 4160, 1028, -1, "fp16", True), (40, 192, 12, 64, "bf16", False)]
    if not quick:
        cases += [(1, 14336, 4096, -1, "fp16", False), (16, 4096, 28672, 128, "bf16", True)]
    return cases


def test_gemv(lib, tally: Tally, rng: np.random.Generator, quick: bool) -> None:
    sm = K.device_sm()
    ncand = lib.candidate_count()
    for m, k, n, group, act, bias in gemv_cases(quick):
        pr = Fp6Problem(m, k, n, group, act, bias, rng)
        probe = pr.params(pr.x)
        cands = [c for c in range(ncand) if lib.supports(c, probe, sm) == K.Status.OK]
        chosen = lib.dispatch(probe, sm)
        tally.check(bool(cands) and chosen in cands, f"{pr.label()} dispatch", f"supported {cands}, dispatch {chosen}")
        run_case(lib, pr, cands + [-1], tally)
    # Refusals: FP6 has no zero points, and layout 1 cannot hold it.
    pr = Fp6Problem(1, 256, 8, -1, "fp16", False, rng)
    for label, kw in (("zero points", {"zeros": pr.scales.data_ptr()}), ("layout 1", {"layout_version": 1})):
        probe = pr.params(pr.x, **kw)
        tally.check(all(lib.supports(c, probe, sm) != K.Status.OK for c in range(ncand))
                    and lib.dispatch(probe, sm) == -1, f"FP6 refusal: {label}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="a subset")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        test_converters(build_convert_lib(tmp), tally, rng)
    test_gemv(K.load(), tally, rng, args.quick)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
