"""CLI (``python -m graph_passes``): end to end on fixture models, and every bad-input case of the issue: one line on
stderr, exit status 2, no traceback, no output file left, the input never modified."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

import cli_cases
import woq_models as models
from cli_cases import ext_model, tree
from cli_cases import sha as _sha
from graph_passes.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def test_default_output_names_differ_by_what_the_model_computes(capsys, rng, mlp_path, tmp_path):
    """Weight-only INT8 and W8A8 (or RTN and AWQ) are different models: neither default name is the other's."""
    assert main(["quantize", str(mlp_path), "-q", "--bits", "8"]) == 0
    assert main(["quantize", str(mlp_path), "-q", "--bits", "8", "--act-mode", "w8a8"]) == 0
    assert main(["quantize", str(mlp_path), "-q", "--bits", "8", "--act-mode", "w8a8", "--act-asymmetric"]) == 0
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((2, 1, 5, 256)).astype(np.float32))
    assert main(["quantize", str(mlp_path), "-q", "--method", "awq", "--calib-data", str(tmp_path / "calib.npz")]) == 0
    assert _files(tmp_path) == ["calib.npz", "mlp.onnx", "mlp.woq_int4_g128_awq.onnx", "mlp.woq_int8_g128.onnx",
                                "mlp.woq_int8_g128_w8a8.onnx", "mlp.woq_int8_g128_w8a8_aasym.onnx"]


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


def test_model_the_checker_refuses(capsys, rng, tmp_path):
    """A model that parses but fails onnx.checker (here an input declared without a shape) is named with the
    checker's reason, not taken for a truncated file."""
    from onnx import TensorProto, helper, numpy_helper

    vi = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [vi("x", TensorProto.FLOAT, None)], [vi("y", TensorProto.FLOAT, ["B", 64])],
                              [numpy_helper.from_array(models.weight(rng, 128, 64), "w")])
    path = tmp_path / "noshape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    _fails(capsys, ["quantize", str(path), "-o", str(tmp_path / "q.onnx")],
           f"{path}: not a valid ONNX model (onnx.checker.check_model says: Field 'shape'")
    assert _files(tmp_path) == ["noshape.onnx"]


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
    rc = main(["compare", str(mlp_path), str(mlp_path), "--input-shape", "x:1,4,256", "--min-cosine", "0.99",
               "--seed", "3"])
    assert rc == 1 and "stand-in report" in capsys.readouterr().out
    assert calls == dict(original=str(mlp_path), quantized=str(mlp_path), input_shapes={"x": (1, 4, 256)}, seed=3,
                         min_cosine=0.99, data=None, data_script=None, samples=None)


def test_tensorrt_commands_point_to_trt_woq(capsys, mlp_path):
    # graph_passes never imports trt_woq (tests/test_import_direction.py): its TensorRT commands live there.
    _fails(capsys, ["build", str(mlp_path), "-o", "m.engine"], "python -m trt_woq build")
    _fails(capsys, ["compare", str(mlp_path), str(mlp_path), "--trt"], "python -m trt_woq compare")


# ------------------------------------------------------------------------------ the user's files are never lost
def test_inspect_report_never_overwrites_the_input(capsys, mlp_path, tmp_path):
    before = tree(tmp_path)
    for extra in ([], ["--force"]):
        _fails(capsys, ["inspect", str(mlp_path), "--report", str(mlp_path), *extra], "is the input model")
    assert tree(tmp_path) == before


def test_inspect_report_refuses_an_existing_file_unless_force(capsys, mlp_path, tmp_path):
    report = tmp_path / "r.json"
    report.write_text("mine\n")
    _fails(capsys, ["inspect", str(mlp_path), "--report", str(report)], "already exists; pass --force")
    assert report.read_text() == "mine\n"
    assert main(["inspect", str(mlp_path), "--report", str(report), "--force"]) == 0
    assert json.loads(report.read_text())["summary"]["rewritten"] == 2


def test_report_is_the_input(capsys, mlp_path, tmp_path):
    (tmp_path / "out").mkdir()
    before = tree(tmp_path)
    _fails(capsys, ["quantize", str(mlp_path), "-o", str(tmp_path / "out" / "r1.onnx"), "--report", str(mlp_path),
                    "--force", "-q"], "is the input model")
    assert tree(tmp_path) == before


def test_report_is_the_output(capsys, mlp_path, tmp_path):
    out = tmp_path / "r2.onnx"
    for extra in ([], ["--force"]):
        _fails(capsys, ["quantize", str(mlp_path), "-o", str(out), "--report", str(out), "-q", *extra],
               "is also the output model")
        assert _files(tmp_path) == ["mlp.onnx"]


def test_output_data_file_is_the_inputs_data_file(capsys, rng, tmp_path):
    (tmp_path / "ext").mkdir()
    model = ext_model(rng, tmp_path / "ext", data="out.onnx.data")
    before = tree(tmp_path)
    for extra in ([], ["--force"]):
        _fails(capsys, ["quantize", str(model), "-o", str(tmp_path / "ext" / "out.onnx"), "-q", *extra],
               "external data of the input model")
        assert tree(tmp_path) == before
    onnx.checker.check_model(str(model))


def test_input_through_a_symlinked_folder(capsys, mlp_path, tmp_path):
    os.symlink(tmp_path, tmp_path.parent / (tmp_path.name + "_link"))
    alias = tmp_path.parent / (tmp_path.name + "_link") / "mlp.onnx"
    hard = tmp_path / "hard.onnx"
    os.link(mlp_path, hard)
    before = tree(tmp_path)
    for out in (alias, hard):
        _fails(capsys, ["quantize", str(mlp_path), "-o", str(out), "--force", "-q"], "is the input model")
        _fails(capsys, ["inspect", str(mlp_path), "--report", str(out), "--force"], "is the input model")
        _fails(capsys, ["quantize", str(mlp_path), "-o", str(tmp_path / "q.onnx"), "--report", str(out), "--force",
                        "-q"], "is the input model")
    assert tree(tmp_path) == before


def test_report_is_the_output_data_file(capsys, rng, tmp_path):
    model = ext_model(rng, tmp_path, data="m.onnx.data")
    before = tree(tmp_path)
    _fails(capsys, ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--report", str(tmp_path / "q.onnx.data"),
                    "-q"], "is also the output's external data")
    assert tree(tmp_path) == before


def test_existing_output_data_file_needs_force(capsys, rng, tmp_path):
    model = ext_model(rng, tmp_path, data="m.onnx.data")
    (tmp_path / "q.onnx.data").write_text("mine\n")
    _fails(capsys, ["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "-q"], "already exists; pass --force")
    assert (tmp_path / "q.onnx.data").read_text() == "mine\n" and not (tmp_path / "q.onnx").exists()
    assert main(["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "-q", "--force"]) == 0
    onnx.checker.check_model(str(tmp_path / "q.onnx"))


def test_output_data_file_name_too_long(capsys, rng, tmp_path):
    """OUT's name fits the folder's name limit but OUT.data's does not (or OUT's neither): refused, for quantize and
    twin, before anything is written."""
    model = ext_model(rng, tmp_path, data="m.onnx.data")
    quantized = tmp_path / "q.onnx"
    assert main(["quantize", str(model), "-o", str(quantized), "-q"]) == 0
    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    before = tree(tmp_path)
    for stem in ("q" * (name_max - len(".onnx") - 1), "q" * name_max):
        out = tmp_path / f"{stem}.onnx"
        line = _fails(capsys, ["quantize", str(model), "-o", str(out), "-q"], f"longer than {name_max} bytes")
        assert "choose another output path (-o)" in line
        _fails(capsys, ["twin", str(quantized), "-o", str(out)], f"longer than {name_max} bytes")
        assert tree(tmp_path) == before
    _fails(capsys, ["inspect", str(model), "--report", str(out)], f"longer than {name_max} bytes")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("which", ["output", "report"])
def test_existing_folder_with_force(capsys, mlp_path, tmp_path, which):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    argv = ["quantize", str(mlp_path), "-q", "--force", "-o", str(folder if which == "output" else tmp_path / "q.onnx")]
    if which == "report":
        argv += ["--report", str(folder)]
    _fails(capsys, argv, "is a folder")
    assert _files(tmp_path) == ["a_folder", "mlp.onnx"] and _files(folder) == []
    _fails(capsys, ["inspect", str(mlp_path), "--report", str(folder), "--force"], "is a folder")


def test_failing_report_leaves_no_model(capsys, mlp_path, tmp_path, monkeypatch):
    import graph_passes.report as report_mod

    def broken(self):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(report_mod.QuantReport, "to_json", broken)
    _fails(capsys, ["quantize", str(mlp_path), "-o", str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.json"),
                    "-q"], "disk full (simulated)")
    assert _files(tmp_path) == ["mlp.onnx"]  # the model was written, then the report failed: neither is left


def test_interrupt_is_one_line_and_leaves_nothing(capsys, mlp_path, tmp_path, monkeypatch):
    import graph_passes.report as report_mod

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(report_mod.QuantReport, "to_json", interrupted)  # Ctrl-C with the model already written
    rc = main(["quantize", str(mlp_path), "-o", str(tmp_path / "q.onnx"), "--report", str(tmp_path / "r.json"), "-q"])
    assert rc == 130 and capsys.readouterr().err == "trt-woq quantize: interrupted\n"
    assert _files(tmp_path) == ["mlp.onnx"]


# ------------------------------------------------------------------------ bad external data: one line, exit 2
@pytest.mark.parametrize("kind, expect", [
    ("short", "shorter than"), ("empty", "shorter than"), ("offset_past_end", "past the end"),
    ("length_mismatch", "declares"), ("dotdot", "outside"), ("absolute", "absolute"), ("link_out", "outside"),
    ("missing", "missing"), ("folder", "not a file"), ("negative_offset", "negative"),
    ("offset_not_int", "not integers"), ("location_nul", "not a file name"),
])
def test_bad_external_data(capsys, tmp_path, kind, expect):
    argvs = cli_cases.external(kind)(np.random.default_rng(0), tmp_path)  # quantize, inspect, compare
    before = tree(tmp_path)
    for argv in argvs:
        _fails(capsys, argv, expect)
        assert tree(tmp_path) == before


# --------------------------------------------------------------------------- compare's arguments: one line, exit 2
@pytest.mark.parametrize("argv, expect", [
    (["--input-shape", "x:-1,256"], "must be >= 1"), (["--input-shape", "x:100000000000,256"], "elements"),
    (["--input-shape", "x:0,256"], "must be >= 1"), (["--seed", "-1"], "--seed"), (["--seed", str(2**40)], "--seed"),
])
def test_compare_bad_arguments(capsys, mlp_path, argv, expect):
    _fails(capsys, ["compare", str(mlp_path), str(mlp_path), *argv], expect)


# ---------------------------------------------------------------------------------------------------- newcomers
def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("trt-woq ") and len(out) > len("trt-woq ")


def test_every_argument_has_help():
    import argparse

    from graph_passes.__main__ import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            assert action.help, (name, action.dest)
