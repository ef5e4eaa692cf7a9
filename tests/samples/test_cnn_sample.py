"""samples/cnn/accuracy.py end to end on a small CNN built here (quantize with the CLI, Q/DQ twin vs original in ONNX
Runtime), and on YOLOv8n when the nudenet package that ships it is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "cnn" / "accuracy.py"
sys.path.insert(0, str(SAMPLE.parent))

import accuracy  # noqa: E402


def _small_cnn(path: Path) -> None:
    """RGB stem (stays float) -> 3x3 64->64 + SiLU -> 3x3 stride 2 64->128 + ReLU -> 1x1 128->32."""
    rng = np.random.default_rng(0)
    layers = [(3, 64, 3, 1, "silu"), (64, 64, 3, 1, "silu"), (64, 128, 3, 2, "relu"), (128, 32, 1, 1, None)]
    nodes, inits, cur = [], [], "images"
    for i, (cin, cout, k, s, act) in enumerate(layers):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(
            (rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                      kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4))
        cur = f"c{i}"
        if act == "silu":
            nodes += [helper.make_node("Sigmoid", [cur], [f"s{i}"]), helper.make_node("Mul", [cur, f"s{i}"], [f"a{i}"])]
            cur = f"a{i}"
        elif act == "relu":
            nodes.append(helper.make_node("Relu", [cur], [f"a{i}"]))
            cur = f"a{i}"
    nodes[-1].output[0] = "out"
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                           ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 32, "h", "w"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)


def test_sample_on_a_small_cnn(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    _small_cnn(path)
    assert accuracy.main(["--model", str(path), "--size", "24", "--images", "2", "--configs",
                          "int8-pc,int4-g64"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| int")]
    assert len(rows) == 2
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    # 3 convs quantized, the stem float, 2 activations fused (the 1x1 has none)
    assert [c[1:4] for c in cells] == [["3", "1", "2"], ["3", "1", "2"]]
    # Random N(0, 1/sqrt(K)) weights: INT4 g64 leaves ~8 % relative weight error per layer, three layers stacked.
    assert float(cells[0][5]) > 0.999 and float(cells[1][5]) > 0.97


def test_images_are_in_range_and_seeded():
    a = accuracy.synthetic_images(2, 40, 3)
    assert a.shape == (2, 3, 40, 40) and a.dtype == np.float32 and a.min() >= 0 and a.max() <= 1
    assert np.array_equal(a, accuracy.synthetic_images(2, 40, 3)) and a.std() > 0.05


def test_yolov8n_from_nudenet():
    model = accuracy.packaged_model()
    if model is None:
        pytest.skip("nudenet is not installed (pip install nudenet --no-deps ships YOLOv8n)")
    done = subprocess.run([sys.executable, str(SAMPLE), "--images", "2", "--configs", "int8-pc,int4-g128"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    cos = [float(line.split("|")[6]) for line in done.stdout.splitlines() if line.startswith("| int")]
    assert cos[0] >= 0.999 and cos[1] >= 0.99, done.stdout


def test_no_model_is_one_line_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(accuracy, "packaged_model", lambda: None)
    assert accuracy.main([]) == 2
    assert "pip install nudenet" in capsys.readouterr().err
