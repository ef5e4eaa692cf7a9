"""Time layout v1 packing of a 4096 x 14336 INT4 matrix (a Llama-3-8B MLP projection), and unpacking, on this CPU.

    python3 scripts/pack_timing.py [--k 4096] [--n 14336] [--bits 4] [--repeat 5] [--seed 0]

Prints the command that reproduces it (defaults written out), the best and median wall time of `pack` and `unpack`
(each run on new random values from the seeded generator) and checks the round trip of the last run. Not a test:
timings depend on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from graph_passes.layouts import interleaved_v1  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--n", type=int, default=14336)
    parser.add_argument("--bits", type=int, choices=(4, 8), default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random values (default 0)")
    args = parser.parse_args()

    print(f"python3 scripts/pack_timing.py --k {args.k} --n {args.n} --bits {args.bits} --repeat {args.repeat} "
          f"--seed {args.seed}")
    rng = np.random.default_rng(args.seed)
    pack_s, unpack_s = [], []
    for _ in range(args.repeat):
        u = rng.integers(0, 1 << args.bits, size=(args.k, args.n), dtype=np.uint8)
        t0 = time.perf_counter()
        packed = interleaved_v1.pack(u, args.bits)
        t1 = time.perf_counter()
        back = interleaved_v1.unpack(packed, args.k, args.n, args.bits)
        t2 = time.perf_counter()
        pack_s.append(t1 - t0)
        unpack_s.append(t2 - t1)
    ok = np.array_equal(back, u)
    print(f"interleaved_v1 INT{args.bits} K={args.k} N={args.n} ({packed.nbytes / 2**20:.1f} MiB packed), "
          f"{args.repeat} runs")
    print(f"  pack:   best {min(pack_s) * 1e3:.0f} ms, median {statistics.median(pack_s) * 1e3:.0f} ms")
    print(f"  unpack: best {min(unpack_s) * 1e3:.0f} ms, median {statistics.median(unpack_s) * 1e3:.0f} ms")
    print(f"  round trip: {'exact' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
