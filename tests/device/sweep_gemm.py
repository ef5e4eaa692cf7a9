"""Every SM90 warp-specialized GEMM candidate against cuBLAS FP16 over M = 129 .. 1024 on the standard shapes, INT4
g128, INT8 per-channel and FP6 per-channel, in one process: the data behind the dispatch rule of
docs/kernels_gemm.md.

For each (K, N, bits, M) the candidates that support the problem, the dispatch's pick and cuBLAS FP16 (torch.matmul)
are timed together (trt_woq.bench.time_interleaved: CUDA graphs over rotating weight copies, the methods' replays
taken in turn); at the --big-ms (default 2048, 4096) only the dispatch's pick, the 256 x 128 tile and cuBLAS (with
--prune, the candidates it keeps). --old-lib: a GEMM library built from another tree (e.g. main): its dispatch's pick, run by
that library (its own kernels) in the same interleaved timing, is the "old" column. --prune R: of the candidates
the cost model knows (gemm_cost.py), only those it puts within R x its lowest estimate are timed. Prints one line
per group, a closing table (cuBLAS, then cuBLAS time / ours for the dispatch, the old dispatch and the fastest
candidate) and a summary per (bits, shape, M range) with the geometric mean and the minimum; writes every time to
--json.

    export TRT_WOQ_GEMM_LIB=build/plugins/kernels/libtrt_woq_kernels_testing.so   # the test library (CMake)
    python3 tests/device/sweep_gemm.py --json sweep.json [--old-lib /tmp/old/libtrt_woq_kernels_testing.so] \
        [--cands 'gemm_wgmma_ws_*x128x64_s6_c2*,gemm_wgmma_ws_256x128x64_s5']
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 1)[0])

import gemm_cost  # noqa: E402
from gemm_lib import OK, Gemm, make_problem, select, with_m  # noqa: E402  (puts python/ on sys.path)
from trt_woq.bench import SHAPES, dumps, time_interleaved  # noqa: E402

MS = [129, 144, 160, 192, 224, 256, 288, 320, 333, 384, 448, 512, 576, 640, 768, 896, 1000, 1023, 1024]
# The warp-specialized tiles for M > 128 (names or shell patterns, gemm_lib.select): 256 x 128 (with two wgmma groups
# in flight: _d2; in clusters of 2: _c2), 128 x 256 and the balanced token tiles (T = 144 .. 224, clustered too).
SM90_CANDIDATES = "gemm_wgmma_ws_256x128x64_s5*,gemm_wgmma_ws_128x256x64_s6*,gemm_wgmma_ws_*x128x64_s6*"
BIG_TILE = "gemm_wgmma_ws_256x128x64_s5"  # the one candidate timed at the --big-ms without --prune
BIG_MS = [2048, 4096]
RANGES = ((129, 1023), (1024, None))
WEIGHT_FORMATS = {4: 128, 8: -1, 6: -1}  # bits -> group size


def copies_for(nbytes: int, l2: int) -> int:
    return max(1, min(8, math.ceil(2.5 * l2 / nbytes)))


MODEL_TILES = gemm_cost.RULE_TILES + gemm_cost.C2_TILES


def sweep_shape(g: Gemm, old: Gemm | None, k: int, n: int, bits: int, ms, cands, l2: int, replays: int,
                prune: float | None, log) -> list[dict]:
    rng = np.random.default_rng()
    group = WEIGHT_FORMATS[bits]
    weights = [make_problem(max(ms), n, k, bits, group, torch.float16, False, False, rng, random_words=True)
               for _ in range(copies_for(k * n * bits // 8, l2))]
    w16 = [torch.randn(k, n, device="cuda", dtype=torch.float16) * 0.02 for _ in range(copies_for(2 * k * n, l2))]
    rows = []
    modelled = {f"gemm_{t.name}{v}" for t in MODEL_TILES for v in gemm_cost.VARIANTS.values()}
    for m in ms:
        m_cands = cands if m not in BIG_MS or prune else select(g, BIG_TILE)
        if prune:
            near = set(gemm_cost.ranked(gemm_cost.RULE, MODEL_TILES, m, n, k, bits, prune))
            m_cands = [c for c in m_cands if g.name(c) in near or g.name(c) not in modelled]
        x = weights[0].x[:m].contiguous()
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        probs = [with_m(w, m) for w in weights]
        for p in probs:
            p.x = x
        prm0 = probs[0].params(out)
        auto = g.dispatch(prm0)
        old_auto = old.dispatch(prm0) if old else -1
        names, methods, keep = ["cublas_fp16"], [[(lambda w=w: torch.matmul(x, w, out=out)) for w in w16]], []
        for c in sorted(set(m_cands) | {auto, -1 if old else old_auto} - {-1}):
            if g.supports(c, prm0) != OK:
                continue
            ws_bytes = g.workspace(c, prm0)
            ws = torch.empty(max(ws_bytes, 4) // 4, device="cuda", dtype=torch.float32)
            prms = [p.params(out, ws if ws_bytes else None) for p in probs]
            st = g.run(c, prms[0])
            if st != OK:
                raise RuntimeError(f"{g.name(c)} M={m} K={k} N={n}: status {st} {g.cuda_error()}")
            keep.append((ws, prms))
            names.append(g.name(c))
            methods.append([(lambda q=q, c=c: g.run(c, q)) for q in prms])
        if old and old_auto >= 0:  # the old library's own kernel
            ws_bytes = old.workspace(old_auto, prm0)
            ws = torch.empty(max(ws_bytes, 4) // 4, device="cuda", dtype=torch.float32)
            prms = [p.params(out, ws if ws_bytes else None) for p in probs]
            if old.run(old_auto, prms[0]) != OK:
                raise RuntimeError(f"old {old.name(old_auto)} M={m} K={k} N={n}: {old.cuda_error()}")
            keep.append((ws, prms))
            names.append("old_lib")
            methods.append([(lambda q=q: old.run(old_auto, q)) for q in prms])
        n_calls = max(4, max(len(mm) for mm in methods))
        times = time_interleaved(methods, min_calls=n_calls, replays=replays)
        res = {nm: (None if isinstance(t, Exception) else round(t, 2)) for nm, t in zip(names, times)}
        cublas = res.pop("cublas_fp16")
        old_lib_us = res.pop("old_lib", None)
        best = min((c for c in res if res[c]), key=res.get)
        pick = {key: (g.name(c), res.get(g.name(c))) if c >= 0 else (None, None)
                for key, c in (("auto", auto), ("old", old_auto))}
        if old:
            pick["old"] = (old.name(old_auto), old_lib_us) if old_auto >= 0 else (None, None)
        row = dict(k=k, n=n, bits=bits, m=m, cublas_us=cublas, auto=pick["auto"][0], auto_us=pick["auto"][1],
                   old=pick["old"][0], old_us=pick["old"][1], best=best, best_us=res[best], all=res)
        rows.append(row)
        log(f"K={k:6d} N={n:6d} {FORMAT[bits]} M={m:5d} | cuBLAS {cublas:8.1f} | auto {row['auto']:40s} "
            f"{row['auto_us'] or float('nan'):8.1f} x{cublas / (row['auto_us'] or float('nan')):.2f} | old "
            f"x{ratio(row, 'old_us'):.2f} | best {best:40s} {res[best]:8.1f} x{cublas / res[best]:.2f}")
        del probs, keep, methods
    return rows


FORMAT = {4: "INT4", 8: "INT8", 6: "FP6"}


def ratio(r: dict, key: str) -> float:
    return r["cublas_us"] / r[key] if r.get(key) else float("nan")


def table(rows: list[dict]) -> str:
    short = lambda name: (name or "-").replace("gemm_wgmma_ws_", "").replace("x64", "")  # noqa: E731
    out = [f"{'bits':>4} {'K x N':>13} {'M':>5} {'cuBLAS':>8} {'auto x':>7} {'old x':>6} {'best x':>7}  auto / old"]
    for r in rows:
        out.append(f"{r['bits']:>4} {r['k']:>6}x{r['n']:<6} {r['m']:>5} {r['cublas_us']:8.1f} {ratio(r, 'auto_us'):7.2f} "
                   f"{ratio(r, 'old_us'):6.2f} {ratio(r, 'best_us'):7.2f}  {short(r['auto'])} / {short(r['old'])}")
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    """Geometric mean and minimum of cuBLAS time / ours per (bits, shape, M range): the dispatch, the old dispatch
    (--old-lib) and the fastest candidate."""
    out = [f"{'bits':>4} {'K x N':>13} {'M range':>10} {'n':>3} {'auto gm':>8} {'auto min':>8} {'old gm':>7} {'old min':>7}"
           f" {'best gm':>7} {'best min':>8}"]
    keys = sorted({(r["bits"], r["k"], r["n"]) for r in rows}, key=lambda t: (t[0], [s for s in SHAPES].index(t[1:])
                                                                               if t[1:] in SHAPES else 99))
    for bits, k, n in keys + [(b, None, None) for b in sorted({r["bits"] for r in rows})]:
        for lo, hi in RANGES:
            sel = [r for r in rows if r["bits"] == bits and (k is None or (r["k"], r["n"]) == (k, n))
                   and r["m"] >= lo and (hi is None or r["m"] <= hi)]
            if not sel:
                continue
            vals = {key: [ratio(r, key) for r in sel if r.get(key)] for key in ("auto_us", "old_us", "best_us")}
            gm = {key: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan") for key, v in vals.items()}
            mn = {key: min(v) if v else float("nan") for key, v in vals.items()}
            label = f"{k}x{n}" if k else "all"
            rng = f"{lo}-{hi}" if hi else f">={lo}"
            out.append(f"{bits:>4} {label:>13} {rng:>10} {len(sel):>3} {gm['auto_us']:8.3f} {mn['auto_us']:8.3f} "
                       f"{gm['old_us']:7.3f} {mn['old_us']:7.3f} {gm['best_us']:7.3f} {mn['best_us']:8.3f}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ms", help="comma-separated M values (default: 129 .. 1024, 19 values, then 2048, 4096)")
    ap.add_argument("--shapes", help="KxN,... (default: trt_woq.bench's eight)")
    ap.add_argument("--bits", default="4,8,6")
    ap.add_argument("--cands", help="candidate names or shell patterns, e.g. 'gemm_wgmma_ws_*_c2*' (default: the ws "
                    "tiles for M > 128)")
    ap.add_argument("--old-lib", help="a GEMM library whose dispatch is the 'old' column")
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--prune", type=float, help="time only the modelled candidates within this factor of the lowest")
    ap.add_argument("--json", default="sweep_gemm.json")
    args = ap.parse_args()
    g = Gemm()
    old = Gemm(args.old_lib) if args.old_lib else None
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    ms = MS + BIG_MS if not args.ms else [int(m) for m in args.ms.split(",")]
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    cands = select(g, args.cands or SM90_CANDIDATES)
    print(f"device {torch.cuda.get_device_name()} sm {g.sm}; FP16 activations; cuBLAS FP16 vs every candidate",
          flush=True)
    rows = []
    t0 = time.time()
    result = dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  command="python3 tests/device/sweep_gemm.py " + " ".join(sys.argv[1:]),
                  candidates=[g.name(c) for c in range(g.count())], rows=rows)
    for bits in (int(b) for b in args.bits.split(",")):
        for k, n in shapes:
            rows += sweep_shape(g, old, k, n, bits, ms, cands, l2, args.replays, args.prune,
                                lambda s: print(s, flush=True))
            torch.cuda.empty_cache()
            result["seconds"] = round(time.time() - t0)
            with open(args.json, "w") as f:  # after every shape, so that a run cut short keeps what it measured
                f.write(dumps(result))
    print(table(rows))
    print(summary(rows))
    print(f"wrote {args.json} ({len(rows)} groups, {result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
