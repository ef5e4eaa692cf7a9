"""python -m trt_woq: every graph_passes subcommand plus the TensorRT ones (build, compare), one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
from trt_woq.__main__ import main

ROOT = Path(__file__).resolve().parents[3]


def _fails(capsys, argv, expect):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert expect in err[0], err


def test_build_wired(capsys, monkeypatch, tiny_model, tmp_path):
    # trt_woq.engine needs TensorRT and a GPU; check the wiring with a stand-in of its documented API.
    calls = {}

    def build_engine(onnx_path, engine_path=None, **kwargs):
        calls.update(onnx_path=onnx_path, engine_path=engine_path, **kwargs)
        open(engine_path, "wb").write(b"engine")
        return b"engine"

    monkeypatch.setitem(sys.modules, "trt_woq.engine", types.SimpleNamespace(build_engine=build_engine))
    engine = tmp_path / "m.engine"
    model_bytes = tiny_model.read_bytes()
    assert main(["build", str(tiny_model), "-o", str(engine), "--profile", "X:1,64/2,64/4,64"]) == 0
    assert calls["profiles"] == [{"X": ((1, 64), (2, 64), (4, 64))}] and calls["precision"] == "auto"
    assert engine.read_bytes() == b"engine"
    _fails(capsys, ["build", str(tiny_model), "-o", str(engine)], "already exists")
    _fails(capsys, ["build", str(tiny_model), "-o", str(engine), "--force", "--profile", "X:1,a"], "--profile")
    # The output rules of graph_passes (pipeline.outputs_for): never the input, never a folder.
    for out, expect in ((tiny_model, "is the input model"), (tmp_path, "is a folder")):
        _fails(capsys, ["build", str(tiny_model), "-o", str(out), "--force"], expect)
    _fails(capsys, ["build", str(tiny_model), "-o", str(engine), "--force", "--timing-cache", str(tiny_model)],
           "is the input model")
    for cache, expect in ((engine, "is also the engine"), (tmp_path, "is a folder")):  # refused before the build
        _fails(capsys, ["build", str(tiny_model), "-o", str(engine), "--force", "--timing-cache", str(cache)], expect)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.engine", "tiny.onnx"]
    assert tiny_model.read_bytes() == model_bytes


def test_build_says_tensorrt_is_missing(no_tensorrt, tiny_model, fake_plugin, capsys, tmp_path):
    _fails(capsys, ["build", str(tiny_model), "-o", str(tmp_path / "m.engine")], "TensorRT is not available")


def test_compare_says_tensorrt_is_missing(no_tensorrt, tiny_model, capsys):
    _fails(capsys, ["compare", str(tiny_model), str(tiny_model)], "TensorRT is not available")


def test_bad_paths_are_named_before_tensorrt(no_tensorrt, tiny_model, capsys, tmp_path):
    """A wrong path is what to fix first: named even where TensorRT is missing too."""
    not_npz = tmp_path / "inputs.npz"
    not_npz.write_text("x = 1")
    model = str(tiny_model)
    for argv, expect in (
            (["compare", str(tmp_path / "missing.onnx"), model], "missing.onnx: no such file"),
            (["compare", model, str(tmp_path)], "is a folder, expected an .onnx file"),
            (["compare", model, model, "--data", str(tmp_path / "d.npz")], "d.npz: no such file"),
            (["compare", model, model, "--data", str(not_npz)], "inputs.npz: not an .npz file"),
            (["compare", model, model, "--data-script", str(tmp_path / "load.py")], "load.py: no such file"),
            (["build", model, "-o", str(tmp_path / "m.engine"), "--plugin", str(tmp_path / "p.so")],
             "p.so: no such file; --plugin"),
            (["build", model, "-o", str(tmp_path / "m.engine"), "--timing-cache", str(tmp_path / "no" / "tc")],
             "does not exist; choose another --timing-cache file")):
        _fails(capsys, argv, expect)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inputs.npz", "tiny.onnx"]


def test_compare_wired(capsys, monkeypatch, tiny_model, tmp_path):
    calls = {}
    data = tmp_path / "d.npz"
    np.savez(data, X=np.ones((4, 2, 64), np.float16))

    class Report:
        passed = True

        def format(self):
            return "stand-in report"

    def compare_trt(original, quantized, **kwargs):
        calls.update(original=original, quantized=quantized, **kwargs)
        return Report()

    monkeypatch.setitem(sys.modules, "trt_woq.compare", types.SimpleNamespace(compare_trt=compare_trt))
    model = str(tiny_model)
    assert main(["compare", model, model, "--data", str(data), "--samples", "4", "--min-cosine", "0.9"]) == 0
    assert "stand-in report" in capsys.readouterr().out
    assert calls == dict(original=model, quantized=model, input_shapes=None, seed=0, min_cosine=0.9,
                         data=str(data), data_script=None, samples=4)


def test_every_subcommand_has_help():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    for sub in ("quantize", "inspect", "compare", "build"):
        res = subprocess.run([sys.executable, "-m", "trt_woq", sub, "--help"], capture_output=True, text=True,
                             cwd=ROOT, env=env)
        assert res.returncode == 0 and "usage: trt-woq " + sub in res.stdout, res.stderr
    res = subprocess.run([sys.executable, "-m", "trt_woq", "compare", "--help"], capture_output=True, text=True,
                         cwd=ROOT, env=env)
    assert "TensorRT engine" in res.stdout and "--data-script" in res.stdout


def test_quantize_is_graph_passes(capsys, tiny_model, tmp_path):
    _fails(capsys, ["quantize", str(tiny_model), "-o", str(tmp_path / "q.onnx")], "no node can be quantized")
