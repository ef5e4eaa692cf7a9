"""Device test of the tensor-core GEMM: every candidate on every problem it supports, against a float64 reference
computed on the GPU, outputs poisoned with NaN before each run, plus the dispatch for all M and the refusal of bad
shapes. INT8 / INT4 (layout 1) and FP6 E3M2 (layout 2: codes packed by fp6_split_v1, the reference from
fp6_e3m2.decode). Prints one line per failure and a closing PASSED / FAILED line; exit status 1 on any failure.

    TRT_WOQ_GEMM_LIB=BUILD/plugins/kernels/libtrt_woq_kernels_testing.so python3 tests/device/gemm_check.py \
        [--bits 4,8,6] [--quick] [--cands PATTERNS]

--quick: the shape sweep on three of its six shapes and fewer M values (every candidate still runs).
--cands: only the candidates these names or shell patterns match (e.g. 'gemm_wgmma_ws_*') in the option and shape
sweeps (the dispatch and the refusals still run).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemm_lib import (INVALID_ARGUMENT, OK, UNSUPPORTED_SHAPE, WORKSPACE, Gemm, Linear, Problem,  # noqa: E402
                      dequant64, make_problem, reference, select, with_m)

# Relative Frobenius error and max error relative to max |Y|: one rounding of W to the activation type and one of Y
# (2^-11 FP16, 2^-8 BF16) bound both with room; a layout or pipeline bug gives errors of order 1.
TOL = {torch.float16: (2e-3, 6e-3), torch.bfloat16: (1.5e-2, 4e-2)}
FAILURES: list[str] = []
COUNT = {"runs": 0}


def fail(msg: str) -> None:
    FAILURES.append(msg)
    print("FAIL", msg, flush=True)


def check(g: Gemm, pr: Problem, cand: int, rows: torch.Tensor | None = None, ref: torch.Tensor | None = None,
          tag: str = "") -> None:
    out = torch.full((pr.m, pr.n), float("nan"), dtype=pr.dtype, device="cuda")  # poison
    prm = pr.params(out)
    ws_bytes = g.workspace(cand, prm)
    ws = None
    if ws_bytes:
        ws = torch.full((ws_bytes // 4,), float("nan"), dtype=torch.float32, device="cuda")
        prm = pr.params(out, ws)
    st = g.run(cand, prm)
    torch.cuda.synchronize()
    COUNT["runs"] += 1
    name = "auto" if cand == -1 else g.name(cand)
    if st != OK:
        fail(f"{tag}{name} {pr.label()}: status {st} {g.cuda_error()}")
        return
    if ref is None:
        ref = reference(pr, rows)
    y = (out if rows is None else out[rows]).double()
    if not torch.isfinite(y).all():
        fail(f"{tag}{name} {pr.label()}: {int((~torch.isfinite(y)).sum())} non-finite outputs (unwritten or NaN)")
        return
    rel = float(torch.linalg.norm(y - ref) / torch.linalg.norm(ref))
    mx = float((y - ref).abs().max() / ref.abs().max())
    tol_rel, tol_max = TOL[pr.dtype]
    if rel > tol_rel or mx > tol_max:
        fail(f"{tag}{name} {pr.label()}: rel err {rel:.2e} (tol {tol_rel}), max err {mx:.2e} (tol {tol_max})")


ONLY: set[int] | None = None  # --cands


def candidates_for(g: Gemm, pr: Problem) -> list[int]:
    prm = pr.params(None)
    return [i for i in range(g.count()) if g.supports(i, prm) == OK and (ONLY is None or i in ONLY)]


def sample_rows(m: int) -> torch.Tensor | None:
    if m <= 512:
        return None
    idx = set(range(0, 16)) | set(range(m - 33, m)) | set(np.random.default_rng().choice(m, 64, replace=False).tolist())
    return torch.tensor(sorted(idx), device="cuda")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", default="4,8,6", help="weight formats to test: 4, 8 (INT), 6 (FP6); default all")
    ap.add_argument("--quick", action="store_true", help="fewer shapes and M values in the shape sweep")
    ap.add_argument("--cands", help="candidate names or shell patterns of the option and shape sweeps, e.g. "
                    "'gemm_wgmma_ws_*' (default: all)")
    args = ap.parse_args()
    global ONLY
    formats = {int(b) for b in args.bits.split(",")}
    g = Gemm()
    ONLY = set(select(g, args.cands)) if args.cands else None
    rng = np.random.default_rng()  # fresh inputs every run
    print(f"sm {g.sm}, {g.count()} GEMM candidates: {[g.name(i) for i in range(g.count())]}", flush=True)
    t0 = time.time()

    # 1. Every option on an odd shape (N not a multiple of the tile, M tail, two groups per K tile for g32). FP6 has
    # no zero points.
    for bits, dtype, group, zeros, bias in itertools.product(sorted(formats), (torch.float16, torch.bfloat16),
                                                             (-1, 32, 64, 128, 256), (False, True), (False, True)):
        if bits == 6 and zeros:
            continue
        pr = make_problem(127, 262 if bits == 8 else 264, 768, bits, group, dtype, zeros, bias, rng)
        ref = reference(pr)
        cands = candidates_for(g, pr)
        if not cands and ONLY is None:
            fail(f"no candidate supports {pr.label()}")
        for c in cands:
            check(g, pr, c, ref=ref, tag="options: ")
    print(f"options sweep done ({COUNT['runs']} runs, {time.time() - t0:.0f}s)", flush=True)

    # 2. M values on LLM and odd shapes; every supported candidate (split-K where it splits).
    # (1024, 34048): 266 N tiles of 128, so the ws tail split has whole tiles and split ones in the same launch.
    # 145, 333, 400, 450, 700: partial last tiles of every token tile (256 and the balanced 144 .. 224: 145 = 144 + 1).
    shapes = [(4096, 4096), (14336, 4096), (4096, 28672), (1088, 1000), (2112, 324), (1024, 34048)]  # (K, N)
    # FP6: per channel, g128 and g64 (K = 1088: 17 groups, g128 does not divide it), bias, M from 17 to 2048.
    configs = [(4, torch.float16, 128, False, False), (8, torch.bfloat16, -1, True, True),
               (4, torch.bfloat16, 64, True, True), (8, torch.float16, 256, False, True),
               (6, torch.float16, -1, False, True), (6, torch.bfloat16, 128, False, True),
               (6, torch.float16, 64, False, False)]
    m_values = {4: (17, 32, 64, 127, 128, 145, 333, 400, 450, 512, 700, 2048, 4096),
                6: (17, 64, 127, 333, 400, 450, 1000, 1024, 2048)}
    if args.quick:
        shapes = [(4096, 4096), (1088, 1000), (2112, 324)]
        m_values = {4: (17, 127, 145, 333, 450, 700, 1000), 6: (17, 127, 333, 400, 1000)}
    main_configs = {(4, torch.float16), (6, torch.float16)}
    for (k, n), (bits, dtype, group, zeros, bias) in itertools.product(shapes, configs):
        if bits not in formats or n % (2 if bits == 8 else 4) or (group != -1 and k % group):
            continue
        base = make_problem(4096, n, k, bits, group, dtype, zeros, bias, rng)
        w64 = dequant64(base)
        for m in m_values.get(bits, m_values[4]):
            if m * k * n > 4096 * 4096 * 4096 and (bits, dtype) not in main_configs:
                continue  # the largest problems once, in the main configuration
            pr = with_m(base, m)
            rows = sample_rows(m)
            ref = reference(pr, rows, w64)
            for c in candidates_for(g, pr) + [-1]:  # -1: the dispatch
                check(g, pr, c, rows=rows, ref=ref, tag="shapes: ")
        del base, w64
    print(f"shape sweep done ({COUNT['runs']} runs, {time.time() - t0:.0f}s)", flush=True)

    # 3. The GEMM's dispatch for every M from 1 to 320 and some larger ones gives the reference's result.
    for bits, dtype in ((4, torch.float16), (8, torch.bfloat16), (6, torch.bfloat16)):
        if bits not in formats:
            continue
        base = make_problem(4096, 520, 1024, bits, 128, dtype, bits != 6, True, rng)
        full_ref = reference(base)
        picks = {}
        for m in list(range(1, 321)) + [333, 400, 450, 511, 600, 1000, 1024, 2047, 4096]:
            pr = with_m(base, m)
            c = g.dispatch(pr.params(None))
            picks.setdefault(g.name(c) if c >= 0 else "none", []).append(m)
            check(g, pr, -1, ref=full_ref[:m], tag="dispatch: ")
        fmt = "fp6" if bits == 6 else f"int{bits}"
        print(f"dispatch {fmt}: " + "; ".join(f"{k}: M {v[0]}..{v[-1]} ({len(v)})" for k, v in picks.items()),
              flush=True)

    # 3b. The same through the library's public ABI (registry: GEMV for small M, GEMM above), M from 1 to 320.
    if os.environ.get("TRT_WOQ_KERNELS_LIB"):
        lin = Linear()
        for bits, group in ((4, 128), (6, -1)):
            if bits not in formats:
                continue
            base = make_problem(4096, 520, 1024, bits, group, torch.float16, bits != 6, True, rng)
            full_ref = reference(base)
            picks = {}
            for m in list(range(1, 321)) + [1000, 4096]:
                pr = with_m(base, m)
                c = lin.dispatch(pr.params(None))
                picks.setdefault(lin.name(c) if c >= 0 else "none", []).append(m)
                check(lin, pr, -1, ref=full_ref[:m], tag="public ABI: ")
            print(f"public ABI dispatch {base.label().split()[3]}: "
                  + "; ".join(f"{k}: M {v[0]}..{v[-1]} ({len(v)})" for k, v in picks.items()), flush=True)
    else:
        print("SKIP public ABI cross-check: TRT_WOQ_KERNELS_LIB not set (the kernels library did not build)")

    # 4. Refusals: shapes the layout cannot take, misaligned pointers, missing workspace.
    pr = make_problem(64, 512, 512, 4, 128, torch.float16, False, False, rng)
    out = torch.empty(64, 512, dtype=torch.float16, device="cuda")
    for field, value, want in (("k", 96, UNSUPPORTED_SHAPE), ("n", 510, UNSUPPORTED_SHAPE),
                               ("group_size", 96, UNSUPPORTED_SHAPE), ("layout_version", 2, UNSUPPORTED_SHAPE),
                               ("weight_format", 3, INVALID_ARGUMENT), ("m", 0, INVALID_ARGUMENT)):
        prm = pr.params(out)
        setattr(prm, field, value)
        for c in range(g.count()):
            st = g.supports(c, prm)
            if st != want:
                fail(f"refusal: {g.name(c)} with {field}={value}: supports() gave {st}, expected {want}")
            st = g.run(c, prm)
            if st != want:
                fail(f"refusal: {g.name(c)} with {field}={value}: run() gave {st}, expected {want}")
    # FP6 refuses zero points and layout 1.
    f6 = make_problem(64, 512, 512, 6, 128, torch.float16, False, False, rng)
    for field, value in (("zeros", f6.scales.data_ptr()), ("layout_version", 1)):
        prm = f6.params(out)
        setattr(prm, field, value)
        for c in range(g.count()):
            if g.supports(c, prm) != UNSUPPORTED_SHAPE or g.run(c, prm) != UNSUPPORTED_SHAPE:
                fail(f"refusal: {g.name(c)} took FP6 with {field}={value}")
    prm = pr.params(out)
    prm.activation += 2  # not 16-byte aligned
    for c in candidates_for(g, pr):
        if g.run(c, prm) != INVALID_ARGUMENT:
            fail(f"refusal: {g.name(c)} ran with a misaligned activation pointer")
    big = make_problem(64, 512, 8192, 4, 128, torch.float16, False, False, rng, random_words=True)
    prm = big.params(out)
    for c in candidates_for(g, big):
        if g.workspace(c, prm) and g.run(c, prm) != WORKSPACE:
            fail(f"refusal: {g.name(c)} ran without its workspace")
    torch.cuda.synchronize()

    print(f"{COUNT['runs']} checked runs in {time.time() - t0:.0f}s, {len(FAILURES)} failures")
    print("PASSED" if not FAILURES else "FAILED")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
