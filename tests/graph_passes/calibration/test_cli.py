"""--method awq / gptq through the CLI: plugin and Q/DQ hold the same weights, calibrated beats RTN on the block
fixture, and every bad calibration input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

import calib_models
from graph_passes.__main__ import main
from graph_passes.compare import plugin_to_qdq
from woq_models import ort_run


@pytest.fixture
def block(tmp_path):
    # A fixed seed: on some random draws AWQ's alpha search keeps `up` unscaled (no Mul), and the fold checks below
    # would then see only two of the three edit kinds.
    rng = np.random.default_rng(0)
    path = tmp_path / "block.onnx"
    onnx.save(calib_models.block(rng), path)
    np.savez(tmp_path / "calib.npz", x=calib_models.samples(rng, 12))
    return path


def _quantize(path, out, *options):
    rc = main(["quantize", str(path), "-o", str(out), "-q", "--calib-data", str(path.with_name("calib.npz")),
               "--report", str(out) + ".json", *options])
    assert rc == 0
    return json.loads(open(str(out) + ".json").read())


def _cosine(a, b) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _dq_constants(model) -> list[tuple]:
    """(codes minus zero points, scales) of every DequantizeLinear of ``model`` as int64 / float64 (scales are exact
    in float64 whether stored as fp16 or as float32 holding fp16 values), in a canonical order: equal pairs mean
    equal weights ``(q - z) * s`` whichever integer type and zero point hold them."""
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type != "DequantizeLinear":
            continue
        q, s, *z = (numpy_helper.to_array(inits[name]) for name in node.input)
        q = q.astype(np.int64)
        if z:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            block = attrs.get("block_size", 0)
            zp = np.repeat(z[0].astype(np.int64), block, axis=0) if block else z[0].astype(np.int64)[None, :]
            q = q - zp
        out.append((q, s.astype(np.float64)))
    return sorted(out, key=lambda t: (t[0].shape, t[0].tobytes()))


@pytest.mark.parametrize("method", ["awq", "gptq"])
@pytest.mark.parametrize("options", [["--bits", "4", "--group-size", "32"], ["--bits", "8", "--group-size", "-1"],
                                     ["--bits", "4", "--group-size", "64", "--asymmetric"]])
def test_plugin_equals_qdq(block, capsys, method, options):
    """Both formats of one method hold identical weights (the plugin model's Q/DQ twin holds exactly the Q/DQ
    model's codes and scales) and the same AWQ edits; the report counts the calibration samples and tokens."""
    plugin, qdq = block.with_name("p.onnx"), block.with_name("q.onnx")
    report = _quantize(block, plugin, "--method", method, *options)
    report_qdq = _quantize(block, qdq, "--method", method, "--format", "qdq", *options)
    assert f"calibration: 12 sample(s), 192 token(s) per linear input, statistics in 1 pass(es), method {method}" \
        in report["notes"]
    assert len(report["rewritten"]) == 5 and len(report_qdq["rewritten"]) == 5
    assert [n for n in report["notes"] if n.startswith("awq")] == [n for n in report_qdq["notes"]
                                                                  if n.startswith("awq")]
    twin = _dq_constants(plugin_to_qdq(onnx.load(plugin)))
    direct = _dq_constants(onnx.load(qdq))
    assert len(twin) == len(direct) == 5
    for a, b in zip(twin, direct):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_awq_folds_and_calibrated_methods_beat_rtn(rng, block, capsys):
    """On the outlier-channel block: AWQ folds where the module docstring of fold.py says, and AWQ and GPTQ each
    bring the outputs closer to the original's than RTN on fresh inputs."""
    x = calib_models.samples(rng, 1, seq=64)[0]
    ref = ort_run(onnx.load(block), {"x": x})
    gaps = {}
    for method in ("rtn", "awq", "gptq"):
        out = block.with_name(f"{method}.onnx")
        opts = ["--method", method, "--format", "qdq", "--bits", "4", "--group-size", "32"]
        if method == "rtn":
            assert main(["quantize", str(block), "-o", str(out), "-q", *opts[:]]) == 0
        else:
            report = _quantize(block, out, *opts)
        got = ort_run(onnx.load(out), {"x": x})
        gaps[method] = 1 - _cosine(ref[0], got[0])
        if method == "awq":
            notes = " | ".join(report["notes"])
            assert "q, k, v: 1/s folded into LayerNormalization 'ln' (scale and bias)" in notes, notes
            assert "down: 1/s folded into MatMul 'up' (weight columns and bias)" in notes, notes
            assert "up: 1/s folded into a new Mul" in notes, notes
    print(gaps)
    assert gaps["awq"] < 0.8 * gaps["rtn"] and gaps["gptq"] < 0.8 * gaps["rtn"]


def _fails(capsys, argv, expect, tmp_path):
    before = sorted(os.listdir(tmp_path))
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert expect in err[0], err
    assert sorted(os.listdir(tmp_path)) == before  # nothing written


def test_cli_calibration_errors(rng, block, tmp_path, capsys):
    out = str(tmp_path / "out.onnx")
    base = ["quantize", str(block), "-o", out]
    npz = str(tmp_path / "calib.npz")
    _fails(capsys, base + ["--method", "awq"], "--method awq needs calibration data", tmp_path)
    script = tmp_path / "data.py"
    script.write_text("import numpy as np\ndef load_data():\n    yield {'x': np.zeros((1, 4, 128), np.float32)}\n")
    _fails(capsys, base + ["--method", "gptq", "--calib-data", npz, "--calib-script", str(script)],
           "give --calib-data or --calib-script, not both", tmp_path)
    _fails(capsys, base + ["--method", "gptq", "--calib-data", npz, "--calib-samples", "0"],
           "--calib-samples 0: must be >= 1", tmp_path)
    bad = {"names": {"y": calib_models.samples(rng, 2)},
           "dtype": {"x": np.ones((2, 1, 4, 128), np.int64)},
           "rank": {"x": np.ones((2, 4, 128), np.float32)},
           "empty": {"x": np.ones((0, 1, 4, 128), np.float32)}}
    expect = {"names": "no array for input x", "dtype": "int64 data for a float32 input",
              "rank": "has the model's rank 3, but the first axis counts the samples", "empty": "no samples"}
    for case, arrays in bad.items():
        path = tmp_path / f"bad_{case}.npz"
        np.savez(path, **arrays)
        _fails(capsys, base + ["--method", "awq", "--calib-data", str(path)], expect[case], tmp_path)
    crash = tmp_path / "crash.py"
    crash.write_text("def load_data():\n    raise RuntimeError('no data here')\n")
    _fails(capsys, base + ["--method", "awq", "--calib-script", str(crash)], "no data here", tmp_path)
    _fails(capsys, base + ["--method", "awq", "--calib-script", str(script) + ":missing"], "no function missing()",
           tmp_path)


def test_calibration_options_that_nothing_reads_are_refused(rng, block, tmp_path, capsys):
    """RTN without --smooth-alpha reads no calibration data: given anyway, it is a mistake to say, not to ignore."""
    out = str(tmp_path / "out.onnx")
    npz = tmp_path / "calib.npz"
    np.savez(npz, x=calib_models.samples(rng, 2))
    for extra in (["--calib-data", str(npz)], ["--method", "rtn", "--calib-data", str(npz), "--calib-samples", "1"],
                  ["--bits", "8", "--act-mode", "w8a8", "--calib-data", str(npz)]):
        _fails(capsys, ["quantize", str(block), "-o", out, *extra],
               "--calib-data: only --method awq / gptq and --smooth-alpha read calibration data", tmp_path)
    _fails(capsys, ["quantize", str(block), "-o", out, "--method", "gptq", "--calib-samples", "1"],
           "--calib-samples counts samples of --calib-data / --calib-script; give one of them", tmp_path)
    _fails(capsys, ["quantize", str(block), "-o", out, "--calib-samples", "1"],
           "--calib-samples counts samples of --calib-data / --calib-script; give one of them", tmp_path)


def test_awq_on_a_model_with_external_data(block, tmp_path, monkeypatch, capsys):
    """AWQ reads the constants it folds 1/s into (the norm's gamma and beta, the producer's weight) from the model's
    folder, not from the working directory: the result equals the one of the same model stored in one file, even
    with a decoy data file of the same name in the working directory."""
    folder = tmp_path / "ext"
    folder.mkdir()
    ext = folder / "block.onnx"
    onnx.save(onnx.load(block), ext, save_as_external_data=True, location="block.onnx.data", size_threshold=0)
    (folder / "calib.npz").write_bytes(block.with_name("calib.npz").read_bytes())
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    (cwd / "block.onnx.data").write_bytes(np.ones(1 << 16, np.float32).tobytes())
    monkeypatch.chdir(cwd)
    opts = ["--method", "awq", "--format", "qdq", "--bits", "4", "--group-size", "32"]
    inline = _quantize(block, tmp_path / "inline.onnx", *opts)
    external = _quantize(ext, folder / "q.onnx", *opts)
    assert [n for n in external["notes"] if n.startswith("awq")] == [n for n in inline["notes"]
                                                                     if n.startswith("awq")]
    for a, b in zip(_dq_constants(onnx.load(tmp_path / "inline.onnx")), _dq_constants(onnx.load(folder / "q.onnx"))):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    x = calib_models.samples(np.random.default_rng(1), 1, seq=8)[0]
    for a, b in zip(ort_run(onnx.load(tmp_path / "inline.onnx"), {"x": x}), ort_run(onnx.load(folder / "q.onnx"),
                                                                                    {"x": x})):
        np.testing.assert_array_equal(a, b)


def _all_nodes(graph):
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else list(a.graphs)):
                yield from _all_nodes(g)


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_calibrated_merged_decoder(rng, tmp_path, capsys, method):
    """Linears inside If branches are calibrated (their inputs are gathered through the If), a weight both branches
    read stays one quantized weight, and on held-out inputs of either branch the error is no worse than RTN's."""
    import subgraph_models

    path = tmp_path / "merged.onnx"
    onnx.save(subgraph_models.merged_decoder(rng), path)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((8, 1, 16, 128)).astype(np.float32),
             use_cache_branch=np.arange(8) % 2 == 0)
    outs = {}
    for m in ("rtn", method):
        outs[m] = tmp_path / f"{m}.onnx"
        extra = ["--calib-data", str(tmp_path / "calib.npz")] if m != "rtn" else []
        assert main(["quantize", str(path), "-o", str(outs[m]), "-q", "--method", m, "--format", "qdq", "--bits",
                     "4", "--group-size", "32", *extra]) == 0
    dq = {m: sum(n.op_type == "DequantizeLinear" for n in _all_nodes(onnx.load(p).graph)) for m, p in outs.items()}
    assert dq[method] == dq["rtn"] == 5, dq  # 7 linears, 2 weights read by both branches
    gaps = {m: [] for m in outs}
    for flag in (True, False):
        feed = {"x": rng.standard_normal((2, 16, 128)).astype(np.float32), "use_cache_branch": np.array(flag)}
        ref = ort_run(onnx.load(path), feed)[0]
        for m, p in outs.items():
            gaps[m].append(1 - _cosine(ref, ort_run(onnx.load(p), feed)[0]))
    print(gaps)
    assert np.mean(gaps[method]) <= 1.1 * np.mean(gaps["rtn"]), gaps


def test_calibration_of_a_branch_no_sample_takes(rng, tmp_path, capsys):
    """Every sample takes the same branch: the other branch's linears whose weight is not shared have no rows and
    are quantized as RTN, which the report says."""
    import subgraph_models

    path = tmp_path / "merged.onnx"
    onnx.save(subgraph_models.merged_decoder(rng), path)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((3, 1, 8, 128)).astype(np.float32),
             use_cache_branch=np.ones(3, bool))
    for method in ("awq", "gptq"):
        report = _quantize(path, tmp_path / f"{method}.onnx", "--method", method, "--bits", "4", "--group-size", "32")
        assert len(report["rewritten"]) == 7, report
        assert "calibration: no sample reaches else_h2f; the linears reading it are quantized with rtn" \
            in report["notes"], report["notes"]


def _packed_values(path) -> list[bytes]:
    model = onnx.load(path)
    return sorted(t.SerializeToString().replace(t.name.encode(), b"") for g in _graphs(model.graph)
                  for t in g.initializer if t.name.endswith(("_packed", "_scales")))


def _graphs(graph):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else list(a.graphs)):
                yield from _graphs(g)


@pytest.mark.parametrize("options", [("--method", "awq", "--bits", "4", "--group-size", "32"),
                                     ("--method", "gptq", "--bits", "4", "--group-size", "32"),
                                     ("--bits", "8", "--group-size", "-1", "--act-mode", "w8a8", "--smooth-alpha",
                                      "0.5")], ids=["awq", "gptq", "smooth"])
def test_merged_decoder_whose_branches_use_the_same_names(rng, tmp_path, capsys, options):
    """optimum's merged decoder runs the same tensor names in both If branches. Calibration keeps them apart: the
    output is a valid model, and it holds the very weights of the same model with the else branch's tensors named
    apart (each branch's rows count, where they are, for the shared weights)."""
    import subgraph_models

    seed = int(rng.integers(1 << 30))
    paths = {}
    for distinct in (False, True):
        paths[distinct] = tmp_path / f"merged_{distinct}.onnx"
        onnx.save(subgraph_models.merged_decoder_same_names(np.random.default_rng(seed), distinct), paths[distinct])
    gain = np.ones(128, np.float32)
    gain[:4] = 20.0
    np.savez(tmp_path / "calib.npz", x=(rng.standard_normal((6, 1, 8, 128)) * gain).astype(np.float32),
             use_cache_branch=np.arange(6) % 2 == 0)
    for distinct, path in paths.items():
        assert main(["quantize", str(path), "-o", str(tmp_path / f"q_{distinct}.onnx"), "-q", "--calib-data",
                     str(tmp_path / "calib.npz"), *options]) == 0, capsys.readouterr().err
    out = onnx.load(tmp_path / "q_False.onnx")
    onnx.checker.check_model(out, full_check=True)
    assert _packed_values(tmp_path / "q_False.onnx") == _packed_values(tmp_path / "q_True.onnx")
    for flag in (True, False):
        feed = {"x": (rng.standard_normal((2, 5, 128)) * gain).astype(np.float32),
                "use_cache_branch": np.array(flag)}
        ref = ort_run(onnx.load(paths[False]), feed)[0]
        assert _cosine(ref, ort_run(plugin_to_qdq(out), feed)[0]) > 0.95
