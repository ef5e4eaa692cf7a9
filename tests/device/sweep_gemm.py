"""Every SM90 GEMM candidate against cuBLAS FP16 over M = 129 .. 1024 on the standard shapes, INT4 g128 and INT8
per-channel, in one process: the data behind the dispatch rule of docs/kernels_gemm.md.

For each (K, N, bits, M) the candidates that support the problem and cuBLAS FP16 (torch.matmul) are timed together
(trt_woq.bench.time_interleaved: CUDA graphs over rotating weight copies, the methods' replays taken in turn).
Prints one line per group and a closing table (cuBLAS, the dispatch's pick, the fastest candidate, both as
cuBLAS time / ours); writes every time to --json.

    export TRT_WOQ_GEMM_LIB=build/plugins/kernels/libtrt_woq_kernels_testing.so   # the test library (CMake)
    python3 tests/device/sweep_gemm.py --json sweep.json
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

from gemm_lib import OK, Gemm, make_problem, with_m  # noqa: E402  (puts python/ on sys.path)
from trt_woq.bench import SHAPES, dumps, time_interleaved  # noqa: E402

MS = [129, 144, 160, 192, 224, 256, 288, 320, 333, 384, 448, 512, 576, 640, 768, 896, 1000, 1023, 1024]
SM90_CANDIDATES = range(8, 25)  # the wgmma and warp-specialized tiles (0-7 are the SM80 mma.sync tiles)
WEIGHT_FORMATS = {4: 128, 8: -1}  # bits -> group size


def copies_for(nbytes: int, l2: int) -> int:
    return max(1, min(8, math.ceil(2.5 * l2 / nbytes)))


def sweep_shape(g: Gemm, k: int, n: int, bits: int, ms, cands, l2: int, replays: int, log) -> list[dict]:
    rng = np.random.default_rng()
    group = WEIGHT_FORMATS[bits]
    weights = [make_problem(max(ms), n, k, bits, group, torch.float16, False, False, rng, random_words=True)
               for _ in range(copies_for(k * n * bits // 8, l2))]
    w16 = [torch.randn(k, n, device="cuda", dtype=torch.float16) * 0.02 for _ in range(copies_for(2 * k * n, l2))]
    rows = []
    for m in ms:
        x = weights[0].x[:m].contiguous()
        out = torch.empty(m, n, device="cuda", dtype=torch.float16)
        probs = [with_m(w, m) for w in weights]
        for p in probs:
            p.x = x
        prm0 = probs[0].params(out)
        names, methods, keep = ["cublas_fp16"], [[(lambda w=w: torch.matmul(x, w, out=out)) for w in w16]], []
        for c in cands:
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
        n_calls = max(4, max(len(mm) for mm in methods))
        times = time_interleaved(methods, min_calls=n_calls, replays=replays)
        res = {nm: (None if isinstance(t, Exception) else round(t, 2)) for nm, t in zip(names, times)}
        cublas = res.pop("cublas_fp16")
        auto = g.dispatch(prm0)
        best = min((c for c in res if res[c]), key=res.get)
        row = dict(k=k, n=n, bits=bits, m=m, cublas_us=cublas, auto=g.name(auto) if auto >= 0 else None,
                   auto_us=res.get(g.name(auto)) if auto >= 0 else None, best=best, best_us=res[best], all=res)
        rows.append(row)
        log(f"K={k:6d} N={n:6d} INT{bits} M={m:5d} | cuBLAS {cublas:8.1f} | auto {row['auto']:40s} "
            f"{row['auto_us'] or float('nan'):8.1f} x{cublas / (row['auto_us'] or float('nan')):.2f} | best {best:40s} "
            f"{res[best]:8.1f} x{cublas / res[best]:.2f}")
        del probs, keep, methods
    return rows


def table(rows: list[dict]) -> str:
    out = [f"{'bits':>4} {'K x N':>13} {'M':>5} {'cuBLAS':>8} {'auto x':>7} {'best x':>7}  best"]
    for r in rows:
        ax = r["cublas_us"] / r["auto_us"] if r["auto_us"] else float("nan")
        out.append(f"{r['bits']:>4} {r['k']:>6}x{r['n']:<6} {r['m']:>5} {r['cublas_us']:8.1f} {ax:7.2f} "
                   f"{r['cublas_us'] / r['best_us']:7.2f}  {r['best'].replace('gemm_wgmma_', '')}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ms", help="comma-separated M values (default: 129 .. 1024, 19 values)")
    ap.add_argument("--shapes", help="KxN,... (default: trt_woq.bench's eight)")
    ap.add_argument("--bits", default="4,8")
    ap.add_argument("--cands", help="comma-separated candidate ids (default: the SM90 ones, 8-24)")
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--json", default="sweep_gemm.json")
    args = ap.parse_args()
    g = Gemm()
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20))
    ms = MS if not args.ms else [int(m) for m in args.ms.split(",")]
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    cands = SM90_CANDIDATES if not args.cands else [int(c) for c in args.cands.split(",")]
    print(f"device {torch.cuda.get_device_name()} sm {g.sm}; FP16 activations; cuBLAS FP16 vs every candidate",
          flush=True)
    rows = []
    t0 = time.time()
    result = dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  command="python3 tests/device/sweep_gemm.py " + " ".join(sys.argv[1:]),
                  candidates=[g.name(c) for c in range(g.count())], rows=rows)
    for bits in (int(b) for b in args.bits.split(",")):
        for k, n in shapes:
            rows += sweep_shape(g, k, n, bits, ms, cands, l2, args.replays, lambda s: print(s, flush=True))
            torch.cuda.empty_cache()
            result["seconds"] = round(time.time() - t0)
            with open(args.json, "w") as f:  # after every shape, so that a run cut short keeps what it measured
                f.write(dumps(result))
    print(table(rows))
    print(f"wrote {args.json} ({len(rows)} groups, {result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
