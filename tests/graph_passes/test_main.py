"""CLI (``python -m graph_passes``): end to end on fixture models, and every bad-input case of the issue: one line on
stderr, exit status 2, no traceback, no output file left, the input never modified."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import woq_models as models
from graph_passes.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _files(folder) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.fixture
def mlp_path(rng, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(rng, k=256, hidden=512), path)
    return path


def _fails(capsys, argv, expect):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len([line for line in err if "error" in line]) == 1 and "Traceback" not in "\n".join(err)
    assert expect in err[-1], err
    return err[-1]


def test_quantize_end_to_end_int8(capsys, rng, mlp_path, tmp_path):
    before = _sha(mlp_path)
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(mlp_path), "-o", str(out), "--bits", "8", "--group-size", "-1", "-q",
                 "--report", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "rewritten: 2 node(s)" in text and f"wrote {out}" in text
    assert _sha(mlp_path) == before
    q = onnx.load(out)
    assert [n.op_type for n in q.graph.node].count("WeightOnlyLinear") == 2
    x = rng.standard_normal((2, 3, 256)).astype(np.float32)
    y = models.ref_run(q, {"x": x})[0].astype(np.float64)
    y0 = models.ort_run(onnx.load(mlp_path), {"x": x})[0].astype(np.float64)
    cos = float((y * y0).sum() / np.linalg.norm(y) / np.linalg.norm(y0))
    assert cos > 0.999, cos
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["rewritten"] == 2


@pytest.mark.parametrize("extra", [[], ["--asymmetric", "--group-size", "64"], ["--format", "qdq"],
                                   ["--act-dtype", "bf16", "--group-size", "32"]])
def test_quantize_options(capsys, mlp_path, tmp_path, extra):
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(mlp_path), "-o", str(out), "-q", *extra]) == 0
    onnx.checker.check_model(onnx.load(out))
    assert _files(tmp_path) == ["mlp.onnx", "q.onnx"]


def test_default_output_name_and_force(capsys, mlp_path, tmp_path):
    assert main(["quantize", str(mlp_path), "-q"]) == 0
    assert (tmp_path / "mlp.woq_int4_g128.onnx").is_file()  # defaults: INT4, g128, symmetric, plugin
    before = _sha(tmp_path / "mlp.woq_int4_g128.onnx")
    _fails(capsys, ["quantize", str(mlp_path), "-q"], "already exists; pass --force")
    assert _sha(tmp_path / "mlp.woq_int4_g128.onnx") == before
    assert main(["quantize", str(mlp_path), "-q", "--force", "--asymmetric", "-o",
                 str(tmp_path / "mlp.woq_int4_g128.onnx")]) == 0
    assert _sha(tmp_path / "mlp.woq_int4_g128.onnx") != before


def test_inspect(capsys, rng, tmp_path):
    path = tmp_path / "mixed.onnx"
    onnx.save(models.mixed(rng, nan=True), path)
    assert main(["inspect", str(path), "--group-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "rewrite  good [MatMul]" in out and "skip     bad_k [MatMul] K not a multiple of 64" in out
    assert "skip     dynamic [MatMul] weight is not constant" in out


def test_missing_file(capsys, tmp_path):
    _fails(capsys, ["quantize", str(tmp_path / "nope.onnx")], "no such file")
    assert _files(tmp_path) == []


def test_truncated_file(capsys, mlp_path, tmp_path):
    data = open(mlp_path, "rb").read()
    for cut in (len(data) // 2, 100, 7):
        bad = tmp_path / f"cut{cut}.onnx"
        bad.write_bytes(data[:cut])
        before = _sha(bad)
        _fails(capsys, ["quantize", str(bad), "-o", str(tmp_path / "q.onnx")], str(bad))
        assert _sha(bad) == before and not (tmp_path / "q.onnx").exists()


@pytest.mark.parametrize("content", [b"", b"hello, I am not a model\n", bytes(range(256)) * 4])
def test_not_onnx(capsys, tmp_path, content):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    _fails(capsys, ["quantize", str(bad), "-o", str(tmp_path / "q.onnx")], str(bad))
    assert _files(tmp_path) == ["bad.onnx"]


def test_no_quantizable_node(capsys, tmp_path):
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    model = models.make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                              [vi("x", TensorProto.FLOAT, ["B", 8])], [vi("y", TensorProto.FLOAT, ["B", 8])], [])
    path = tmp_path / "relu.onnx"
    onnx.save(model, path)
    _fails(capsys, ["quantize", str(path), "-o", str(tmp_path / "q.onnx")], "no node can be quantized")
    assert _files(tmp_path) == ["relu.onnx"]


def test_k_not_divisible_by_group(capsys, rng, tmp_path):
    # Only node has K=192 with --group-size 128: an error (nothing to write). With another quantizable node it is
    # skipped and reported instead (see test_pipeline / test_to_plugin).
    path = tmp_path / "m.onnx"
    onnx.save(models.gemm(rng, k=192, n=64), path)
    _fails(capsys, ["quantize", str(path), "-o", str(tmp_path / "q.onnx"), "--group-size", "128"],
           "1 x K not a multiple of group size 128")
    assert _files(tmp_path) == ["m.onnx"]
    assert main(["quantize", str(path), "-o", str(tmp_path / "q.onnx"), "--group-size", "64", "-q"]) == 0


def test_nan_weight_named(capsys, rng, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(models.mixed(rng, nan=True), path)
    before = _sha(path)
    assert main(["quantize", str(path), "-o", str(tmp_path / "q.onnx"), "--group-size", "64", "-q"]) == 0
    assert "1 x NaN/Inf in weight: nan_node" in capsys.readouterr().out
    assert _sha(path) == before
    # A model whose only linear layer has NaN: one-line error naming the node.
    onnx.save(models.mixed(rng, nan=True), path)
    _fails(capsys, ["quantize", str(path), "-o", str(tmp_path / "q2.onnx"), "--include", "nan_node"],
           "NaN/Inf in weight")
    assert not (tmp_path / "q2.onnx").exists()


def test_unwritable_output(capsys, mlp_path, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    _fails(capsys, ["quantize", str(mlp_path), "-o", str(blocker / "q.onnx")], "does not exist")
    _fails(capsys, ["quantize", str(mlp_path), "-o", str(tmp_path / "no" / "dir" / "q.onnx")], "does not exist")
    _fails(capsys, ["quantize", str(mlp_path), "-o", str(mlp_path), "--force"], "is the input model")
    assert _files(tmp_path) == ["a_file", "mlp.onnx"]


def test_bad_options_one_line(capsys, mlp_path):
    _fails(capsys, ["quantize", str(mlp_path), "--bits", "3"], "invalid choice")
    _fails(capsys, ["quantize", str(mlp_path), "--include", "("], "not a valid regular expression")


def test_subprocess_no_traceback_and_help(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    res = subprocess.run([sys.executable, "-m", "graph_passes", "quantize", str(tmp_path / "missing.onnx")],
                         capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    for sub in ("quantize", "inspect", "compare", "build"):
        res = subprocess.run([sys.executable, "-m", "graph_passes", sub, "--help"], capture_output=True, text=True,
                             cwd=ROOT, env=env)
        assert res.returncode == 0 and "usage: trt-woq " + sub in res.stdout


def test_compare_wired(capsys, monkeypatch, mlp_path, tmp_path):
    # graph_passes.compare is another engineer's module; check the wiring with a stand-in of its documented API.
    import types

    calls = {}

    class Report:
        passed = False

        def format(self):
            return "stand-in report"

    def compare(original, quantized, **kwargs):
        calls.update(original=original, quantized=quantized, **kwargs)
        return Report()

    monkeypatch.setitem(sys.modules, "graph_passes.compare", types.SimpleNamespace(compare=compare))
    rc = main(["compare", str(mlp_path), "q.onnx", "--input-shape", "x:1,4,256", "--min-cosine", "0.99",
               "--seed", "3"])
    assert rc == 1 and "stand-in report" in capsys.readouterr().out
    assert calls == dict(original=str(mlp_path), quantized="q.onnx", input_shapes={"x": (1, 4, 256)}, seed=3,
                         min_cosine=0.99, data=None, data_script=None, samples=None)


def test_tensorrt_commands_point_to_trt_woq(capsys, mlp_path):
    # graph_passes never imports trt_woq (tests/test_import_direction.py): its TensorRT commands live there.
    _fails(capsys, ["build", str(mlp_path), "-o", "m.engine"], "python -m trt_woq build")
    _fails(capsys, ["compare", str(mlp_path), str(mlp_path), "--trt"], "python -m trt_woq compare")
