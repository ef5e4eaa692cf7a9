"""Accuracy of the sample under several quantization options: logits cosine against the original over input seeds.

    python3 samples/llama/accuracy.py [--seed 0] [--seeds 5] [--configs int8-pc,int4-g128] [--model llama.onnx]

One seed fixes everything: the sample is built with weights seed SEED (unless --model is given) and each
configuration is compared on input seeds SEED, SEED + 1, ..., SEED + SEEDS - 1 (``graph_passes.compare.compare``;
one of them alone is ``python -m graph_passes compare ORIGINAL QUANTIZED --seed S``). Quantization itself is
deterministic, so two runs with the same arguments print the same numbers. The script first prints the command that
reproduces its output, every default written out, then per configuration min / median / max of the logits cosine
and the median max-rel error. The README's accuracy table is this script's output with its defaults.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CONFIGS = {  # name: (label, quantize options)
    "int8-pc": ("INT8 per-channel", ["--bits", "8", "--group-size", "-1"]),
    "int8-g128": ("INT8 g128", ["--bits", "8", "--group-size", "128"]),
    "int4-g128": ("INT4 g128", ["--bits", "4", "--group-size", "128"]),
    "int4-g128-asym": ("INT4 g128 asym", ["--bits", "4", "--group-size", "128", "--asymmetric"]),
    "int4-g32": ("INT4 g32", ["--bits", "4", "--group-size", "32"]),
    "int4-pc": ("INT4 per-channel", ["--bits", "4", "--group-size", "-1"]),
    "fp6-pc": ("FP6 per-channel", ["--bits", "6", "--group-size", "-1"]),
    "fp6-g128": ("FP6 g128", ["--bits", "6", "--group-size", "128"]),
    "w8a8-pc": ("W8A8 per-channel", ["--bits", "8", "--group-size", "-1", "--act-mode", "w8a8"]),
    "w8a8-g128": ("W8A8 g128", ["--bits", "8", "--group-size", "128", "--act-mode", "w8a8"]),
}
DEFAULT_SEED = 0


def parse_configs(text: str) -> list[str]:
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown configuration {', '.join(unknown) or '(none)'}; "
                                         f"choose from {', '.join(CONFIGS)}")
    return names


def reproduce_command(args) -> str:
    """The command line that prints the same figures: every option that changes them, defaults included."""
    cmd = ["python3", "samples/llama/accuracy.py", "--seed", str(args.seed), "--seeds", str(args.seeds),
           "--configs", ",".join(args.configs)]
    return shlex.join(cmd + (["--model", args.model] if args.model else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"sample weights seed and first input seed (default {DEFAULT_SEED})")
    parser.add_argument("--seeds", type=int, default=5, help="input seeds per configuration (default 5)")
    parser.add_argument("--configs", type=parse_configs, default=list(CONFIGS),
                        help=f"comma-separated, from {', '.join(CONFIGS)} (default: all)")
    parser.add_argument("--model", help="an already built sample (default: build one with weights seed --seed)")
    parser.add_argument("--workdir", help="where to write the models (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")

    from graph_passes.compare import compare

    input_seeds = range(args.seed, args.seed + args.seeds)
    print(reproduce_command(args))
    with tempfile.TemporaryDirectory(prefix="trt_woq_accuracy_") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = Path(args.model) if args.model else work / "llama.onnx"
        if args.model:
            print(f"model: {args.model}")
        else:
            subprocess.run([sys.executable, str(REPO / "samples/llama/build_model.py"), "-o", str(model),
                            "--seed", str(args.seed)], check=True, stdout=subprocess.DEVNULL)
            print(f"model: samples/llama/build_model.py --seed {args.seed} (its other defaults)")
        print(f"input seeds {input_seeds.start}..{input_seeds.stop - 1}\n")
        print(f"{'configuration':<18} {'cosine min':>11} {'median':>9} {'max':>9} {'max rel err (median)':>21}")
        for name in args.configs:
            label, options = CONFIGS[name]
            out = work / f"llama.{name}.onnx"
            subprocess.run([sys.executable, "-m", "graph_passes", "quantize", str(model), "-o", str(out), "--quiet",
                            "--force", *options], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
            results = [compare(model, out, seed=s).outputs[0] for s in input_seeds]
            cos = [r.cosine for r in results]
            print(f"{label:<18} {min(cos):>11.6f} {statistics.median(cos):>9.6f} {max(cos):>9.6f} "
                  f"{statistics.median(r.max_rel for r in results):>21.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
