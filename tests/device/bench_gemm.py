"""GEMM benchmark (issue 4): every GEMM candidate and the dispatch's choice against cuBLAS FP16 (torch.matmul) on the
LLM shapes, M in {1, 4, 16, 64, 256, 1024, 4096}. CUDA-graph replays of at least 20 launches over rotating buffers
(more than 200 MB per operand, so the weights come from HBM, not L2), median of 7 replays (trt_woq.bench.time_calls).

    TRT_WOQ_GEMM_LIB=BUILD/plugins/kernels/libtrt_woq_kernels_testing.so python3 tests/device/bench_gemm.py [--quick] \
        [--one M,K,N,name[,name...]]

--one times the given candidates alone; with --eager each runs once outside any graph and nothing is timed (for ncu).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemm_lib import OK, Gemm, make_problem, select, with_m  # noqa: E402  (puts python/ on sys.path)
from trt_woq.bench import copy_bandwidth, time_calls  # noqa: E402

SHAPES = [(4096, 28672), (14336, 4096), (8192, 57344)]  # (K, N)
MS = [1, 4, 16, 64, 256, 1024, 4096]
LAUNCHES = 20
ROTATE_BYTES = 200 << 20


def time_graph(launch_list) -> float:
    """Seconds per launch: trt_woq.bench's CUDA-graph timing (>= LAUNCHES calls cycling over launch_list a replay),
    median of 7 replays."""
    return time_calls(launch_list, min_calls=LAUNCHES, replays=7) * 1e-6


def copies(nbytes: int) -> int:
    return max(1, min(8, -(-ROTATE_BYTES // max(nbytes, 1))))


def bench_shape(g: Gemm, k: int, n: int, ms, bits=4, group=128, dtype=torch.float16, only=None, cands=None,
                eager=False):
    rng = np.random.default_rng()
    rows = []
    wbytes = k * n * bits // 8
    nw = copies(wbytes)
    weights = [make_problem(max(ms), n, k, bits, group, dtype, False, False, rng, random_words=True)
               for _ in range(nw)]
    w16 = [torch.randn(k, n, device="cuda", dtype=dtype) * 0.02 for _ in range(copies(2 * k * n))]
    for m in ms:
        flops = 2.0 * m * n * k
        xs = [torch.randn(m, k, device="cuda", dtype=dtype) for _ in range(copies(2 * m * k))]
        outs = [torch.empty(m, n, device="cuda", dtype=dtype) for _ in range(2)]
        nl = max(len(xs), len(w16))
        t_cublas = time_graph([lambda i=i, xs=xs, outs=outs: torch.matmul(xs[i % len(xs)], w16[i % len(w16)],
                                                                          out=outs[i % 2]) for i in range(nl)])
        probs = [with_m(w, m) for w in weights]
        for i, p in enumerate(probs):
            p.x = xs[i % len(xs)]
        prm0 = probs[0].params(outs[0])
        auto = g.dispatch(prm0)
        wanted = range(g.count()) if cands is None else sorted(set(cands) | {auto})
        res = {}
        for c in [c for c in wanted if g.supports(c, prm0) == OK] if only is None else only:
            ws_bytes = g.workspace(c, prm0)
            ws = torch.empty(max(ws_bytes, 4) // 4, device="cuda", dtype=torch.float32)
            prms = [p.params(outs[i % 2], ws if ws_bytes else None) for i, p in enumerate(probs)]
            st = g.run(c, prms[0])
            if st != OK:
                raise RuntimeError(f"{g.name(c)} M={m} K={k} N={n}: status {st} {g.cuda_error()}")
            if eager:
                torch.cuda.synchronize()
                print(f"ran {g.name(c)} M={m} K={k} N={n} bits {bits}", flush=True)
                continue
            res[c] = time_graph([lambda q=q, c=c: g.run(c, q) for q in prms])
        if eager:
            continue
        best = min(res, key=res.get)
        row = dict(m=m, k=k, n=n, cublas_us=t_cublas * 1e6, cublas_tflops=flops / t_cublas / 1e12,
                   best=g.name(best), best_us=res[best] * 1e6, auto=g.name(auto) if auto >= 0 else "-",
                   auto_us=res[auto] * 1e6 if auto in res else float("nan"),
                   all={g.name(c): round(t * 1e6, 1) for c, t in res.items()})
        row["auto_tflops"] = flops / (row["auto_us"] * 1e-6) / 1e12
        row["ratio"] = row["cublas_us"] / row["auto_us"]
        rows.append(row)
        print(f"K={k:6d} N={n:6d} M={m:5d} | cuBLAS fp16 {row['cublas_us']:9.1f} us {row['cublas_tflops']:6.1f} TF/s"
              f" | auto {row['auto']:32s} {row['auto_us']:9.1f} us {row['auto_tflops']:6.1f} TF/s"
              f" x{row['ratio']:.2f} | best {row['best']} {row['best_us']:.1f} us", flush=True)
        print("    all:", row["all"], flush=True)
        del xs, outs, probs
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only M = 64, 256, 1024, 4096")
    ap.add_argument("--one", help="M,K,N,name[,name...]: time these candidates (names or shell patterns) alone "
                    "(for ncu)")
    ap.add_argument("--eager", action="store_true", help="with --one: run each once, no timing (ncu)")
    ap.add_argument("--bits", type=int, default=4, help="4, 8 (INT, g128) or 6 (FP6 per channel)")
    ap.add_argument("--ms", help="comma-separated M values (default: all, or --quick's)")
    ap.add_argument("--shapes", help="comma-separated KxN shapes (default: the three LLM shapes)")
    ap.add_argument("--cands", help="candidate names or shell patterns to time (default: all; the dispatch's pick "
                    "always)")
    args = ap.parse_args()
    g = Gemm()
    group = -1 if args.bits == 6 else 128
    print(f"device {torch.cuda.get_device_name()} sm {g.sm}; bits {args.bits} group {group}, FP16 activations vs "
          f"cuBLAS FP16")
    if args.one:
        m, k, n, *names = args.one.split(",")
        bench_shape(g, int(k), int(n), [int(m)], bits=args.bits, group=group, only=select(g, ",".join(names)),
                    eager=args.eager)
        return 0
    # Context: the device-to-device copy bandwidth in this run.
    print(f"d2d copy: {copy_bandwidth() / 1e3:.2f} TB/s (read + write)")
    ms = MS if not args.quick else [64, 256, 1024, 4096]
    if args.ms:
        ms = [int(m) for m in args.ms.split(",")]
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    for k, n in shapes:
        bench_shape(g, k, n, ms, bits=args.bits, group=group,
                    cands=None if args.cands is None else select(g, args.cands))
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
