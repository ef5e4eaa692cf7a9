"""Accuracy of a real trained CNN after weight-only quantization: YOLOv8n (the 320 x 320 detector that the PyPI
package ``nudenet`` ships as ``nudenet/320n.onnx``, 3.2 M parameters, SiLU activations), or any single-input NCHW
model given with ``--model``.

    pip install nudenet --no-deps          # 10 MB wheel; only its ONNX file is used (nothing imported, no download)
    python3 samples/cnn/accuracy.py        # prints one row per configuration
    python3 samples/cnn/accuracy.py --model other.onnx --size 224 --configs int8-pc

For each configuration: ``python -m graph_passes quantize`` (plugin format: WeightOnlyConv nodes, activations fused),
then the original model and the quantized model's Q/DQ twin (the same integer weights and scales, the fused
activations written back as standard ops) run in ONNX Runtime on the same inputs; the figures are over the model's
first output, all images together. Inputs: ``--images`` synthetic RGB scenes in [0, 1] (smooth gradients, blurred
blobs and edges, seeded): the value range and spatial statistics the network was trained on, not N(0, 1) noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
CONFIGS = {"int8-pc": ["--bits", "8", "--group-size", "-1"], "int8-g128": ["--bits", "8", "--group-size", "128"],
           "int4-g128": ["--bits", "4", "--group-size", "128"], "int4-g64": ["--bits", "4", "--group-size", "64"],
           "int4-g32": ["--bits", "4", "--group-size", "32"]}
DEFAULT_CONFIGS = "int8-pc,int4-g128,int4-g64"


def packaged_model() -> Path | None:
    """nudenet's 320n.onnx, found without importing the package (which would import onnxruntime and OpenCV)."""
    spec = importlib.util.find_spec("nudenet")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "320n.onnx"
    return path if path.is_file() else None


def synthetic_images(n: int, size: int, seed: int) -> np.ndarray:
    """[n, 3, size, size] float32 in [0, 1]: a colour gradient, blurred blobs and a few sharp-edged rectangles."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.empty((n, 3, size, size), np.float32)
    for i in range(n):
        img = rng.uniform(0.2, 0.8, (3, 1, 1)) + rng.uniform(-0.3, 0.3, (3, 1, 1)) * xx + \
            rng.uniform(-0.3, 0.3, (3, 1, 1)) * yy
        for _ in range(12):
            cy, cx, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.03, 0.2)
            img += rng.uniform(-0.5, 0.5, (3, 1, 1)) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        for _ in range(4):
            y0, x0 = rng.integers(0, size - 4, 2)
            h, w = rng.integers(4, max(5, size // 3), 2)
            img[:, y0:y0 + h, x0:x0 + w] = rng.uniform(0, 1, (3, 1, 1))
        out[i] = np.clip(img + rng.normal(0, 0.02, img.shape), 0, 1)
    return out


def ort_session(model_bytes: bytes):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # see graph_passes.compare
    so.log_severity_level = 3
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def run_config(model: Path, config: str, x: np.ndarray, work: Path) -> dict:
    import onnx

    sys.path.insert(0, str(REPO))
    from graph_passes.compare import compare_arrays, plugin_to_qdq

    out = work / f"{config}.onnx"
    report = work / f"{config}.json"
    cmd = [sys.executable, "-m", "graph_passes", "quantize", str(model), "-o", str(out), "--force", "-q",
           "--report", str(report), *CONFIGS[config]]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{config}: quantize failed: {done.stderr.strip() or done.stdout.strip()}")
    import json

    rep = json.loads(report.read_text())
    original = ort_session(model.read_bytes())
    name = original.get_inputs()[0].name
    y0 = original.run(None, {name: x})[0]
    twin = plugin_to_qdq(onnx.load(str(out)))
    y1 = ort_session(twin.SerializeToString()).run(None, {name: x})[0]
    c = compare_arrays("output", y0, y1)
    fused = sum(r["activation"] != "none" for r in rep["rewritten"])
    return {"config": config, "rewritten": len(rep["rewritten"]), "skipped": len(rep["skipped"]), "fused": fused,
            "cosine": c.cosine, "max_rel": c.max_rel, "weights_before": rep["weight_bytes_before"],
            "weights_after": rep["weight_bytes_after"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="ONNX model (default: nudenet's 320n.onnx, YOLOv8n)")
    p.add_argument("--size", type=int, default=320, help="input height = width (default 320)")
    p.add_argument("--images", type=int, default=4, help="synthetic images (default 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma-separated, of {', '.join(CONFIGS)}")
    args = p.parse_args(argv)
    model = args.model or packaged_model()
    if model is None:
        print("no model: pip install nudenet --no-deps (it ships YOLOv8n as nudenet/320n.onnx), or pass --model",
              file=sys.stderr)
        return 2
    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        print(f"unknown config(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    x = synthetic_images(args.images, args.size, args.seed)
    print(f"model {model}, {args.images} synthetic images {args.size} x {args.size}, seed {args.seed}")
    print("| configuration | convs quantized | kept float | activations fused | conv weights | cosine | max rel err |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for config in configs:
            r = run_config(model, config, x, Path(tmp))
            print(f"| {config} | {r['rewritten']} | {r['skipped']} | {r['fused']} | "
                  f"{r['weights_before'] / 2**20:.2f} -> {r['weights_after'] / 2**20:.2f} MiB | {r['cosine']:.6f} | "
                  f"{r['max_rel']:.4f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
