"""Accuracy of the sample under several quantization options: logits cosine vs the original over a few input seeds.

    python3 samples/llama/accuracy.py [--model llama.onnx] [--seeds 5] [--workdir DIR]

Builds the sample with its defaults (unless --model is given), runs ``python -m graph_passes quantize`` for each
configuration below and ``graph_passes.compare.compare`` on ``--seeds`` fresh input seeds, and prints min / median /
max of the logits cosine and the median max-rel error. The figures in the README come from this script.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CONFIGS = [  # label, quantize options
    ("INT8 per-channel", ["--bits", "8", "--group-size", "-1"]),
    ("INT8 g128", ["--bits", "8", "--group-size", "128"]),
    ("INT4 g128", ["--bits", "4", "--group-size", "128"]),
    ("INT4 g128 asym", ["--bits", "4", "--group-size", "128", "--asymmetric"]),
    ("INT4 g32", ["--bits", "4", "--group-size", "32"]),
    ("INT4 per-channel", ["--bits", "4", "--group-size", "-1"]),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="an already built sample (default: build one with the defaults)")
    parser.add_argument("--seeds", type=int, default=5, help="input seeds per configuration (default 5)")
    parser.add_argument("--workdir", help="where to write the models (default: a temporary folder)")
    args = parser.parse_args()

    from graph_passes.compare import compare

    with tempfile.TemporaryDirectory(prefix="trt_woq_accuracy_") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = Path(args.model) if args.model else work / "llama.onnx"
        if not args.model:
            subprocess.run([sys.executable, str(REPO / "samples/llama/build_model.py"), "-o", str(model)], check=True)
        seeds = [int(s) for s in np.random.default_rng().integers(2**31, size=args.seeds)]
        print(f"\n{model}, {args.seeds} input seeds each (input_ids [2, 32])\n")
        print(f"{'configuration':<18} {'cosine min':>11} {'median':>9} {'max':>9} {'max rel err (median)':>21}")
        for label, options in CONFIGS:
            out = work / f"llama.{label.replace(' ', '_')}.onnx"
            subprocess.run([sys.executable, "-m", "graph_passes", "quantize", str(model), "-o", str(out), "--quiet",
                            "--force", *options], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
            results = [compare(model, out, seed=s).outputs[0] for s in seeds]
            cos = [r.cosine for r in results]
            print(f"{label:<18} {min(cos):>11.6f} {statistics.median(cos):>9.6f} {max(cos):>9.6f} "
                  f"{statistics.median(r.max_rel for r in results):>21.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
