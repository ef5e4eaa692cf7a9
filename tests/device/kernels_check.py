"""Device test of the decode kernels (issue 3): exhaustive converter tables and the small-batch GEMV against float64.

Run on a GPU machine from the repository root (tests/device/run_kernels.sh does build + this + sanitizer + bench):

    TRT_WOQ_KERNELS_PATH=build/plugins/kernels/libtrt_woq_kernels.so PYTHONPATH=python:. \\
        python3 tests/device/kernels_check.py [--quick] [--seed S] [--candidates NAME,...]

The converters run through the test library (target trt_woq_kernels_testing) beside the kernels library, or
$TRT_WOQ_KERNELS_TESTING_PATH.

1. Converters: every INT8 value in every byte of a word and every INT4 value in every nibble, FP16 and BF16, must equal
   the table q = U - 2^(bits-1) built here in numpy from the layout's element order (bit-exact), plus 1M random words.
2. GEMV, every candidate and the dispatch: M in {1, 2, 3, 7, 8, 15, 16}; LLM shapes and odd ones (K = 4160 leaves a
   half INT4 chunk, N = 1028 a partial tile); group sizes -1/32/64/128/256; symmetric and zero points; bias on/off;
   FP16 and BF16. Data are fresh random numbers each run (seed printed), packed by graph_passes' interleaved_v1.pack;
   the reference is float64 X @ ((U - Z) * S) + bias; outputs are poisoned with NaN before each launch. Pass when the
   normwise relative error is below the activation type's tolerance and the largest error below 4x that of max|Y|.
   The warp-specialized candidates (gemv_ws*) also run M in 1..16 and 17..64 (gemv_ws_nt4) on odd shapes with every
   group size, zero points, bias, epilogue and activation type (ws_cases; --ws-only: those alone, e.g. under
   compute-sanitizer racecheck).
3. Refusals: shapes the layout or the GEMV cannot take come back as the right status, never as a launch.

Prints one line per failure and a final `N passed, N failed`; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

from graph_passes.layouts import interleaved_v1
from graph_passes.registry.epilogues import EPILOGUES
from trt_woq import kernels as K

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Normwise relative tolerance: weights rounded once to the activation type (2^-11 / 2^-8 relative) plus the output's
# own rounding; FP32 accumulation adds nothing visible at these K.
TOL = {"fp16": 2e-3, "bf16": 1.2e-2}
M_VALUES = (1, 2, 3, 7, 8, 15, 16)
CLIP = {"clip_min": -0.5, "clip_max": 0.75}
WS_PREFIX = "gemv_ws"  # the warp-specialized candidates: also M in 1..64 on odd shapes (ws_cases)
WS_ALL = tuple(range(1, 17)) + (17, 24, 31, 32, 33, 40, 48, 63, 64)  # every M in 1..16, both wide column-tile sets
WS_M = WS_ALL  # --ws-m: these only
ALL_CANDIDATES = False  # --all-candidates: also every other family's candidates that accept M <= 16
ONLY = None  # --candidates: only these GEMV candidates (names) and the dispatch


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok: bool, label: str, detail: str = "") -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {label} {detail}", flush=True)


# ----------------------------------------------------------------------------------------------------------------
# 1. Converters
# ----------------------------------------------------------------------------------------------------------------
ORDER4 = np.array([0, 2, 4, 6, 1, 3, 5, 7])  # nibble p holds element ORDER4[p] (docs/layouts.md, step 3)


def expected_elements(words: np.ndarray, bits: int) -> np.ndarray:
    """Table: per word, elements e0..e(E-1) as q = U - 2^(bits-1), from the layout's bit positions."""
    w = words.astype(np.uint64)
    if bits == 8:
        fields = np.stack([(w >> (8 * p)) & 0xFF for p in range(4)], axis=1)  # byte p = e_p
        return fields.astype(np.int64) - 128
    nibbles = np.stack([(w >> (4 * p)) & 0xF for p in range(8)], axis=1)
    elems = np.empty_like(nibbles)
    elems[:, ORDER4] = nibbles  # element ORDER4[p] <- nibble p
    return elems.astype(np.int64) - 8


def converter_words(bits: int, rng: np.random.Generator) -> np.ndarray:
    e = 32 // bits
    levels = 1 << bits
    v = np.arange(levels, dtype=np.uint64)
    # Each position p takes every value (v + 37 p mod levels): all values in all positions, neighbours differ.
    words = np.zeros(levels, np.uint64)
    for p in range(e):
        words |= ((v + 37 * p) % levels) << np.uint64(bits * p)
    # Every value in one position with all others zero and with all others at the maximum.
    extra = []
    for p in range(e):
        for fill in (0, levels - 1):
            base = 0
            for o in range(e):
                if o != p:
                    base |= fill << (bits * o)
            extra.append(base | (v << np.uint64(bits * p)))
    rand = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64)  # and random words: neighbours of all kinds
    return np.concatenate([words] + extra + [rand]).astype(np.uint32)


def testing_library(lib: K.Kernels) -> str:
    """The test library (test entries + the public ABI): $TRT_WOQ_KERNELS_TESTING_PATH, else the build's copy beside
    the kernels library."""
    return os.environ.get("TRT_WOQ_KERNELS_TESTING_PATH") or str(lib.path.with_name("libtrt_woq_kernels_testing.so"))


def test_converters(lib: K.Kernels, tally: Tally, rng: np.random.Generator) -> None:
    import ctypes

    fn = ctypes.CDLL(str(testing_library(lib))).trt_woq_testing_convert  # plugins/kernels/src/testing.cu
    fn.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    for bits in (8, 4):
        words = converter_words(bits, rng)
        want = expected_elements(words, bits)
        dw = torch.from_numpy(words.view(np.int32)).cuda()
        for act, dtype in DTYPES.items():
            out = torch.full((words.size, 32 // bits), float("nan"), dtype=dtype, device="cuda")
            st = fn(bits, int(K.Act[act.upper()]), dw.data_ptr(), out.data_ptr(), words.size,
                    torch.cuda.current_stream().cuda_stream)
            torch.cuda.synchronize()
            got = out.double().cpu().numpy()
            bad = np.argwhere(got != want)
            detail = ""
            if bad.size:
                i, j = bad[0]
                detail = f"word 0x{int(words[i]):08x} element {j}: got {got[i, j]}, want {want[i, j]} ({len(bad)} bad)"
            tally.check(st == 0 and bad.size == 0, f"convert INT{bits}->{act}", f"status {st} {detail}")


# ----------------------------------------------------------------------------------------------------------------
# 2. GEMV
# ----------------------------------------------------------------------------------------------------------------
class Problem:
    """(reference, packed, scales, zeros, bias, x) built together; the reference never looks at the packed words."""

    def __init__(self, m, k, n, bits, group, act, zeros, bias, rng, epilogue="none"):
        self.m, self.k, self.n, self.bits, self.group, self.act = m, k, n, bits, group, act
        self.epilogue = EPILOGUES.get(epilogue)
        self.clip = CLIP if self.epilogue.params else {}
        dtype = DTYPES[act]
        g = k if group == -1 else group
        levels = 1 << bits
        u = rng.integers(0, levels, size=(k, n), dtype=np.uint8)
        self.packed = torch.from_numpy(interleaved_v1.pack(u, bits)).cuda()
        # Scales sized so |W| ~ 1/sqrt(K)-ish; random signs too (the kernels must not assume positive scales).
        s = (rng.uniform(0.5, 1.5, size=(k // g, n)) * rng.choice([-1.0, 1.0], size=(k // g, n))) / (levels * 4)
        self.scales = torch.from_numpy(s).to(dtype).cuda()
        self.zeros = torch.from_numpy(rng.integers(0, levels, size=(k // g, n)).astype(np.float64)).to(dtype).cuda() \
            if zeros else None
        self.bias = torch.from_numpy(rng.standard_normal(n)).to(dtype).cuda() if bias else None
        self.x = torch.from_numpy(rng.standard_normal((m, k))).to(dtype).cuda()
        # float64 reference from U, S (as stored), Z on the GPU
        u64 = torch.from_numpy(u).cuda().double()
        s64 = self.scales.double().repeat_interleave(g, dim=0)
        z64 = (self.zeros.double().repeat_interleave(g, dim=0) if zeros else torch.full_like(u64, levels // 2))
        w64 = (u64 - z64) * s64
        self.ref = self.x.double() @ w64
        if bias:
            self.ref += self.bias.double()
        self.ref = torch.from_numpy(self.epilogue.reference(self.ref.cpu().numpy(), **self.clip)).cuda()
        self._w64 = w64 if k * n <= 1 << 20 else None

    def label(self) -> str:
        return (f"m={self.m} k={self.k} n={self.n} INT{self.bits} g{self.group} {self.act}"
                f"{' zeros' if self.zeros is not None else ''}{' bias' if self.bias is not None else ''}"
                f"{'' if self.epilogue.name == 'none' else ' ' + self.epilogue.name}")

    def params(self, out) -> K.LinearParams:
        return K.make_params(m=self.m, n=self.n, k=self.k, bits=self.bits, group_size=self.group, act=self.act,
                             x=self.x.data_ptr(), packed_weight=self.packed.data_ptr(),
                             scales=self.scales.data_ptr(),
                             zeros=self.zeros.data_ptr() if self.zeros is not None else None,
                             bias=self.bias.data_ptr() if self.bias is not None else None, output=out.data_ptr(),
                             epilogue=K.Epilogue[self.epilogue.name.upper()], **self.clip)

    def check_packer(self) -> bool:
        """The packed words, unpacked by the layout module, dequantize to the same W (small problems only)."""
        if self._w64 is None:
            return True
        z = self.zeros.double().cpu().numpy() if self.zeros is not None else None
        w = interleaved_v1.dequantize_reference(self.packed.cpu().numpy(), self.scales.double().cpu().numpy(), z,
                                                self.k, self.n, self.bits, self.group)
        return bool(np.array_equal(w, self._w64.cpu().numpy()))


def launch_poisoned(lib: K.Kernels, pr, cand: int, stream, label: str, tally: Tally):
    """Runs candidate ``cand`` (-1: the dispatch) on problem ``pr`` (``m``, ``n``, ``act``, ``params(out)``) into a
    NaN-poisoned output, with a workspace of the size the library asks for; (output, workspace), or None after
    recording the failure. The workspace is poisoned too (0xAB bytes), so what a check reads back from it was
    written by this launch."""
    out = torch.full((pr.m, pr.n), float("nan"), dtype=DTYPES[pr.act], device="cuda")
    prm = pr.params(out)
    ws_bytes = lib.workspace_size(prm, cand)
    ws = torch.full((max(ws_bytes, 1),), 0xAB, dtype=torch.uint8, device="cuda")
    if ws_bytes:
        prm.workspace, prm.workspace_size = ws.data_ptr(), ws_bytes
    try:
        lib.run(prm, stream=stream, candidate=cand)
        torch.cuda.synchronize()
    except K.KernelError as e:
        tally.check(False, label, str(e))
        return None
    return out, ws


def run_case(lib: K.Kernels, pr: Problem, candidates: list[int], tally: Tally) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    tol = TOL[pr.act]
    ref_norm = pr.ref.norm().item()
    ref_max = pr.ref.abs().max().item()
    for cand in candidates:
        name = "auto" if cand == -1 else lib.candidate_name(cand)
        launched = launch_poisoned(lib, pr, cand, stream, f"{pr.label()} [{name}]", tally)
        if launched is None:
            continue
        out, _ = launched
        y = out.double()
        finite = bool(torch.isfinite(y).all())
        err = (y - pr.ref).norm().item() / ref_norm if finite else float("inf")
        max_err = (y - pr.ref).abs().max().item() if finite else float("inf")
        ok = finite and err <= tol and max_err <= 4 * tol * ref_max
        tally.check(ok, f"{pr.label()} [{name}]", f"rel {err:.2e} max {max_err:.2e} (tol {tol:g}, finite {finite})")


def gemv_cases(quick: bool, rng: np.random.Generator):
    """(m, k, n, bits, group, act, zeros, bias) tuples."""
    cases = []
    # Every M on an LLM shape and on odd shapes, three configurations each.
    shapes = [(4096, 4096), (4160, 1028), (192, 12), (64, 4)]
    m_values = M_VALUES
    if quick:
        shapes = [(4160, 1028)]
        m_values = (1, 3, 9, 16)
    for m in m_values:
        for k, n in shapes:
            g128 = 128 if k % 128 == 0 else 64
            cases.append((m, k, n, 4, g128, "fp16", False, False))
            cases.append((m, k, n, 4, g128, "bf16", True, True))
            cases.append((m, k, n, 8, -1, "fp16", False, True))
            cases.append((m, k, n, 8, 32 if k % 64 == 0 else -1, "bf16", True, False))
    # Every option combination on a mid shape with ragged N tiles; M cycles through the list.
    i = 0
    for bits in (4, 8):
        for group in (-1, 32, 64, 128, 256):
            for act in ("fp16", "bf16"):
                for zeros in (False, True):
                    for bias in (False, True):
                        if quick and (zeros != bias or act == "bf16"):
                            continue
                        cases.append((M_VALUES[i % len(M_VALUES)], 1536, 1004, bits, group, act, zeros, bias))
                        i += 1
    # Big LLM shapes (split over many CTAs and warps, long K).
    if not quick:
        for m in (1, 16):
            cases.append((m, 14336, 4096, 4, 128, "fp16", False, False))
            cases.append((m, 4096, 28672, 4, 128, "bf16", True, True))
            cases.append((m, 8192, 8192, 8, -1, "fp16", False, True))
            cases.append((m, 28672, 1028, 4, 32, "fp16", True, False))
    return cases


def ws_cases(quick: bool):
    """(m, k, n, bits, group, act, zeros, bias, epilogue) for the warp-specialized candidates: every M in 1..16 and M
    up to 64 around the column-tile sets' edges (17, 31, 33, 63, 64) on shapes with N an odd multiple of the
    interleave (a partial last CTA), K = 4160 (a half last chunk and stage) and a K below one stage; every group size,
    zero points, bias, epilogue and activation type, cycled over M."""
    shapes = [(4160, 1028, 4), (192, 4, 4), (4160, 1030, 8), (1536, 258, 8), (8192, 1028, 4)]
    groups = {4: (128, -1, 64, 32), 8: (-1, 64, 32, 128)}
    names = [e.name for e in EPILOGUES]
    cases = []
    i = 0
    for m in WS_M:
        if quick and m not in (1, 9, 16, 17, 33, 64) and WS_M is WS_ALL:
            continue
        for k, n, bits in shapes:
            group = groups[bits][i % 4]
            if group != -1 and k % group:
                group = 64
            cases.append((m, k, n, bits, group, ("fp16", "bf16")[i % 2], i % 3 == 1, i % 2 == 0,
                          names[i % len(names)]))
            i += 1
    return cases


def test_gemv(lib: K.Kernels, tally: Tally, rng: np.random.Generator, quick: bool, ws_only: bool = False) -> None:
    ncand = lib.candidate_count()
    sm = K.device_sm()
    t0 = time.time()
    cases = [] if ws_only else gemv_cases(quick, rng)
    for m, k, n, bits, group, act, zeros, bias in cases:
        pr = Problem(m, k, n, bits, group, act, zeros, bias, rng)
        tally.check(pr.check_packer(), f"{pr.label()} packer/dequantize_reference agreement")
        probe = pr.params(pr.x)  # sizes only
        cands = [c for c in range(ncand) if lib.supports(c, probe, sm) == K.Status.OK
                 and (ALL_CANDIDATES or lib.candidate_name(c).startswith("gemv"))
                 and (ONLY is None or lib.candidate_name(c) in ONLY)]
        chosen = lib.dispatch(probe, sm)
        gemv_expected = m <= 8 or bits == 8 or sm < 90  # INT4, M > 8, SM90: the GEMM family's pick (measured faster)
        tally.check((bool(cands) or ONLY is not None) and chosen >= 0 and lib.supports(chosen, probe, sm) == K.Status.OK
                    and (lib.candidate_name(chosen).startswith("gemv") or not gemv_expected),
                    f"{pr.label()} dispatch", f"supported {cands}, dispatch {chosen}")
        run_case(lib, pr, cands + [-1], tally)
    print(f"gemv: {len(cases)} problems x {ncand} candidates + auto in {time.time() - t0:.1f} s", flush=True)
    ws = [c for c in range(ncand) if lib.candidate_name(c).startswith(WS_PREFIX)
          and (ONLY is None or lib.candidate_name(c) in ONLY)]
    t0 = time.time()
    wcases = ws_cases(quick)
    for m, k, n, bits, group, act, zeros, bias, epilogue in wcases:
        pr = Problem(m, k, n, bits, group, act, zeros, bias, rng, epilogue)
        probe = pr.params(pr.x)
        run_case(lib, pr, [c for c in ws if lib.supports(c, probe, sm) == K.Status.OK] + [-1], tally)
    print(f"gemv ws: {len(wcases)} problems x {len(ws)} candidates + auto in {time.time() - t0:.1f} s", flush=True)


# ----------------------------------------------------------------------------------------------------------------
# 3. Refusals
# ----------------------------------------------------------------------------------------------------------------
def test_refusals(lib: K.Kernels, tally: Tally) -> None:
    x = torch.randn(32, 8192, dtype=torch.float16, device="cuda")
    y = torch.empty(32, 8192, dtype=torch.float16, device="cuda")
    w = torch.zeros(8192 * 8192 // 8, dtype=torch.int32, device="cuda")
    s = torch.ones(8192, dtype=torch.float16, device="cuda")

    def expect(status, label, raw=None, **kw):  # raw: struct fields set after make_params (which would refuse them)
        base = dict(m=1, n=4096, k=4096, weight_format="int4", group_size=128, act="fp16", x=x.data_ptr(),
                    packed_weight=w.data_ptr(), scales=s.data_ptr(), output=y.data_ptr())
        base.update(kw)
        params = K.make_params(**base)
        for field, value in (raw or {}).items():
            setattr(params, field, value)
        try:
            lib.run(params)
            got = K.Status.OK
        except K.KernelError as e:
            got = e.status
            msg = str(e)
            tally.check(f"m={base['m']}" in msg and f"n={base['n']}" in msg and f"k={base['k']}" in msg,
                        f"refusal message names m, n, k: {label}", msg)
        tally.check(got == status, f"refusal {label}", f"got {got.name}, want {status.name}")

    expect(K.Status.UNSUPPORTED_SHAPE, "K % 64 != 0", k=4000)
    expect(K.Status.UNSUPPORTED_SHAPE, "N % 4 != 0 (INT4)", n=4098)
    expect(K.Status.UNSUPPORTED_SHAPE, "group 96", group_size=96)
    expect(K.Status.UNSUPPORTED_SHAPE, "group 256 not dividing K=4160", k=4160, group_size=256)
    expect(K.Status.INVALID_ARGUMENT, "weight format 3", raw=dict(weight_format=3))
    expect(K.Status.UNSUPPORTED_SHAPE, "layout 2", layout_version=2)
    if not any(K.WeightFormat.FP6_E3M2 in lib.candidate_info(i).weight_formats for i in range(lib.candidate_count())):
        expect(K.Status.UNSUPPORTED_OPTION, "FP6 with no candidate serving it", weight_format="fp6_e3m2")
    expect(K.Status.INVALID_ARGUMENT, "null activation", x=None)
    expect(K.Status.INVALID_ARGUMENT, "misaligned weights", packed_weight=w.data_ptr() + 4)
    expect(K.Status.INVALID_ARGUMENT, "negative n", n=-4)
    # M > 16: the GEMV refuses it except the row-copy warp-specialized kernel (gemv_ws_nt4, M <= 64); M > 64 only a
    # GEMM family may take; where none is built auto refuses.
    gemv_ids = [i for i, nm in enumerate(lib.candidates()) if nm.startswith("gemv")]
    for m, wide in ((17, {"gemv_ws_nt4"}), (64, {"gemv_ws_nt4"}), (65, set())):
        pm = K.make_params(m=m, n=4096, k=4096, bits=4, group_size=128)
        tally.check(all((lib.supports(i, pm, 90) == K.Status.OK) == (lib.candidate_name(i) in wide) for i in gemv_ids),
                    f"GEMV refuses M={m} except {sorted(wide)}")
    p65 = K.make_params(m=65, n=4096, k=4096, bits=4, group_size=128)
    if lib.dispatch(p65, 90) == -1:
        expect(K.Status.UNSUPPORTED_SHAPE, "M=65 with no GEMM family", m=65)
    tally.check(all(lib.supports(i, K.make_params(m=1, n=4096, k=4096, bits=4, group_size=128), 75)
                    == K.Status.UNSUPPORTED_ARCH for i in gemv_ids), "GEMV refuses SM75")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset (for compute-sanitizer)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--all-candidates", action="store_true", help="also run non-GEMV candidates on these problems")
    ap.add_argument("--candidates", help="comma-separated GEMV candidate names: only these (and the dispatch's pick)")
    ap.add_argument("--ws-only", action="store_true", help="only the warp-specialized cases (e.g. under racecheck)")
    ap.add_argument("--ws-m", help="comma-separated M values of the warp-specialized cases (default: all of WS_M)")
    args = ap.parse_args()
    global ALL_CANDIDATES, ONLY, WS_M
    ALL_CANDIDATES = args.all_candidates
    if args.ws_m:
        WS_M = tuple(int(v) for v in args.ws_m.split(","))
    ONLY = set(args.candidates.split(",")) if args.candidates else None
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}; {torch.cuda.get_device_name()}; library {K.load().path}", flush=True)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    lib = K.load()
    print(f"candidates: {lib.candidates()}", flush=True)
    tally = Tally()
    if not args.ws_only:
        test_converters(lib, tally, rng)
        test_refusals(lib, tally)
    test_gemv(lib, tally, rng, args.quick, args.ws_only)
    print(f"{tally.passed} passed, {tally.failed} failed", flush=True)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
