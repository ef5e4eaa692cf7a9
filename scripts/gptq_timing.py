"""Time GPTQ on one 4096 x 14336 linear (a Llama-3-8B MLP projection) with 2048 calibration tokens, on this CPU.

    python3 scripts/gptq_timing.py [--k 4096] [--n 14336] [--tokens 2048] [--bits 4] [--group-size 128]

Random correlated inputs and weights (seed 0). Prints the wall and CPU time of the three steps: X^T X (float64, done
while calibrating), the dampened inverse Hessian's Cholesky factor (float64), and GPTQ itself, and the layer's
relative output error against RTN's on the calibration inputs. Not a test: timings depend on the machine and on what
else runs on it (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from graph_passes.calibration.codec import int_codec, quantize_weight  # noqa: E402
from graph_passes.calibration.gptq import gptq_quantize, inverse_hessian  # noqa: E402
from graph_passes.quantizers import DEFAULT_CLIP_RATIOS  # noqa: E402


class _Clock:
    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self, what: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        print(f"{what:<32} wall {wall - self.wall:6.1f} s   cpu {cpu - self.cpu:6.1f} s")
        self.wall, self.cpu = wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=14336)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--bits", type=int, choices=(4, 8), default=4)
    parser.add_argument("--group-size", type=int, default=128)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    mix = np.eye(args.k, dtype=np.float32) + rng.standard_normal((args.k, args.k), np.float32) / np.sqrt(args.k)
    x = rng.standard_normal((args.tokens, args.k), np.float32) @ mix
    w = (rng.standard_normal((args.k, args.n), np.float32) * 0.02).astype(np.float32)
    print(f"GPTQ INT{args.bits} g{args.group_size}, K={args.k} N={args.n}, {args.tokens} tokens, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    clock = _Clock()
    x64 = x.astype(np.float64)
    gram = x64.T @ x64
    del x64
    clock.lap("X^T X (calibration)")
    hinv = inverse_hessian(gram, args.tokens, 0.01)
    clock.lap("inverse Hessian (Cholesky)")
    # the ratios the gptq method searches (every other one of the default grid)
    codec = int_codec(args.bits, args.group_size, False, "fp16", DEFAULT_CLIP_RATIOS[::2])
    q = gptq_quantize(w, hinv, codec)
    clock.lap("GPTQ")
    rtn = quantize_weight(int_codec(args.bits, args.group_size, False, "fp16"), w)
    ref = x @ w
    for name, qw in (("RTN", rtn), ("GPTQ", q)):
        err = np.linalg.norm(x @ qw.dequantize().astype(np.float32) - ref) / np.linalg.norm(ref)
        print(f"output error {name}: {err:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
