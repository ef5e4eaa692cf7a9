"""Small-batch sweep: chosen GEMV candidates and the dispatch's pick against cuBLAS FP16 and Marlin over M = 1..64 on
the standard shapes, INT4 g128 and INT8 per channel (FP6 per channel with --formats fp6_pc), in one process: the data
behind the GEMV dispatch rule (docs/kernels.md).

For each (K, N, format, M) the methods are timed together (trt_woq.bench.time_interleaved: CUDA graphs over rotating
weight copies, the methods' replays taken in turn). Prints one line per group (µs, and the dispatch's pick) and writes
every time to --json.

    export TRT_WOQ_KERNELS_PATH=build/plugins/kernels/libtrt_woq_kernels.so PYTHONPATH=python:.
    python3 tests/device/sweep_gemv.py --candidates auto,gemv_mma_xs_nt4_cluster --json sweep.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from trt_woq import bench as B
from trt_woq import kernels as K

FORMATS = {"int4_g128": (4, 128), "int8_pc": (8, -1), "fp6_pc": (6, -1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=B.parse_shapes, default=B.SHAPES)
    ap.add_argument("--m", default="1,2,4,8,9,12,16,17,24,32,40,48,64")
    ap.add_argument("--formats", default="int4_g128,int8_pc")
    ap.add_argument("--candidates", default="auto", help="'auto' (the dispatch) and candidate names, comma-separated")
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--json", default="sweep_gemv.json")
    args = ap.parse_args()
    lib = K.load()
    props = torch.cuda.get_device_properties(0)
    sm = props.major * 10 + props.minor
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    names = lib.candidates()
    cands = args.candidates.split(",")
    ms = [int(v) for v in args.m.split(",")]
    rows = []
    for k, n in args.shapes:
        cublas = B.setup_cublas(k, n, "fp16", l2)
        for fmt in args.formats.split(","):
            bits, group = FORMATS[fmt]
            setups = {"cublas_fp16": cublas}
            if bits == 4 and B.marlin_available():
                setups["marlin"] = B.setup_marlin(k, n, l2)
            for c in cands:
                cid = K.CANDIDATE_AUTO if c == "auto" else names.index(c)
                setups[c] = B.setup_ours(lib, k, n, bits, group, False, "fp16", l2, candidate=cid)
            for m in ms:
                probe = K.make_params(m=m, n=n, k=k, bits=bits, group_size=group)
                timed = [nm for nm in setups if nm in ("cublas_fp16", "marlin", "auto")
                         or lib.supports(names.index(nm), probe, sm) == K.Status.OK]
                times = B.time_interleaved([setups[nm].make_calls(m) for nm in timed], replays=args.replays)
                us = {nm: (None if isinstance(t, Exception) else round(t, 2)) for nm, t in zip(timed, times)}
                pick = names[lib.dispatch(probe, sm)]
                rows.append(dict(k=k, n=n, fmt=fmt, m=m, pick=pick, us=us))
                print(f"{k}x{n} {fmt} m={m}: " + " ".join(f"{nm}={t}" for nm, t in us.items()) + f" (auto={pick})",
                      flush=True)
            del setups
            torch.cuda.empty_cache()
        del cublas
        torch.cuda.empty_cache()
        with open(args.json, "w") as f:
            json.dump(dict(device=props.name, rows=rows), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
