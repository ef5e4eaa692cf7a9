"""The ONNX-Runtime twin of a plugin-format model (``python -m graph_passes twin``), with FP6 as a float twin: the
twin holds exactly what the packed file holds, agrees with the op's float64 reference, and the CLI refuses bad
input in one line."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import woq_models as models
from graph_passes import op
from graph_passes.__main__ import main
from graph_passes.compare import compare, plugin_to_qdq
from graph_passes.layouts import fp6_split_v1


def _session(model):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _fp6_model(tmp_path, rng, group, act):
    src = tmp_path / "mlp.onnx"
    out = tmp_path / f"mlp.fp6_{group}_{act}.onnx"
    onnx.save(models.mlp(rng, k=256, hidden=384), src)
    assert main(["quantize", str(src), "-o", str(out), "--bits", "6", "--group-size", str(group), "--act-dtype",
                 act, "-q"]) == 0
    return src, out


@pytest.mark.parametrize("group,act", [(-1, "fp16"), (128, "fp16"), (64, "bf16")])
def test_fp6_twin_holds_the_packed_weights(tmp_path, rng, group, act):
    _, path = _fp6_model(tmp_path, rng, group, act)
    model = onnx.load(path)
    nodes = [n for n in model.graph.node if n.op_type == "WeightOnlyLinear"]
    assert nodes and all({a.name: a.i for a in n.attribute}["layout"] == 2 for n in nodes)
    assert all({a.name: a.i for a in n.attribute}["bits"] == 6 for n in nodes)
    twin = plugin_to_qdq(model)
    onnx.checker.check_model(twin, full_check=True)
    assert not any(n.domain == "trt_woq" for n in twin.graph.node)
    assert not any(n.op_type == "DequantizeLinear" for n in twin.graph.node)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    twin_inits = {t.name: numpy_helper.to_array(t) for t in twin.graph.initializer}
    for node in nodes:
        a = {x.name: x.i for x in node.attribute}
        k, n = a["in_features"], a["out_features"]
        scales = inits[node.input[2]]
        w = fp6_split_v1.dequantize_reference(inits[node.input[1]], scales.astype(np.float64), None, k, n, 6, group)
        got = twin_inits[f"{node.name}.qdq.weight"]
        np.testing.assert_array_equal(got, w.astype(scales.dtype).astype(got.dtype))  # one rounding, nothing else

    x = rng.standard_normal((2, 5, 256)).astype(np.float32)
    y_twin = _session(twin).run(None, {"x": x})[0].astype(np.float64)
    y_ref = op.reference_evaluator(model).run(None, {"x": x})[0].astype(np.float64)
    assert np.abs(y_twin - y_ref).max() / np.abs(y_ref).max() < (4e-3 if act == "fp16" else 1.6e-2)


def test_compare_runs_fp6_through_the_float_twin(tmp_path, rng):
    src, path = _fp6_model(tmp_path, rng, -1, "fp16")
    report = compare(str(src), str(path), seed=3, input_shapes={"x": (2, 9, 256)})
    [out] = report.outputs
    assert "FP6: dequantized float weights" in report.via
    assert out.finite and out.cosine > 0.99  # random Gaussian weights: ~5 % RMS weight error per layer


def test_twin_cli(tmp_path, rng, capsys):
    _, path = _fp6_model(tmp_path, rng, 128, "fp16")
    twin_path = tmp_path / "twin.onnx"
    assert main(["twin", str(path), "-o", str(twin_path)]) == 0
    assert "2 WeightOnlyLinear / WeightOnlyConv node(s) replaced" in capsys.readouterr().out
    x = rng.standard_normal((1, 3, 256)).astype(np.float32)
    y = _session(onnx.load(twin_path)).run(None, {"x": x})[0]
    assert y.shape == (1, 3, 256) and np.isfinite(y).all()
    for argv, expect in (([str(path), "-o", str(twin_path)], "already exists; pass --force"),
                         ([str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "t2.onnx")], "has no trt_woq::"),
                         ([str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "t3.onnx")], "no such file")):
        assert main(["twin"] + argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expect in err[0], err
    assert not (tmp_path / "t2.onnx").exists() and not (tmp_path / "t3.onnx").exists()


def test_fp6_refusals_are_one_line(tmp_path, rng, capsys):
    src = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(rng), src)
    for extra, expect in ((["--format", "qdq"], "ONNX has no data type for FP6"),
                          (["--asymmetric"], "no zero points")):
        assert main(["quantize", str(src), "-o", str(tmp_path / "o.onnx"), "--bits", "6", "-q"] + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expect in err[0], err
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("via", ["twin", "compare"])
def test_twin_of_external_data_model_reads_one_weight_at_a_time(tmp_path, rng, monkeypatch, via):
    """A plugin model over 2 GB lives in external data: its twin is built reading each packed weight when its node is
    converted, not from a model with all of the data loaded (and copied): on a 2.3 GB fp16 decoder quantized to
    INT4 (812 MiB of data) that copy made `twin` peak at 3.4 GB of RSS."""
    import graph_passes.compare as cmp
    import graph_passes.pipeline as pipeline

    src, q = tmp_path / "mlp.onnx", tmp_path / "mlp.q.onnx"
    onnx.save(models.mlp(rng, k=256, hidden=384), src)
    monkeypatch.setattr(pipeline, "EXTERNAL_DATA_THRESHOLD", 0)  # stand-in for the 2 GB protobuf limit
    assert main(["quantize", str(src), "-o", str(q), "-q"]) == 0
    assert (tmp_path / "mlp.q.onnx.data").is_file()
    packed = {n.input[1] for n in onnx.load(q, load_external_data=False).graph.node if n.op_type == "WeightOnlyLinear"}
    held = []
    real = cmp._node_to_qdq

    def spy(node, inits, new_inits, *rest):
        held.append(sum(len(t.raw_data) for name, t in inits.items() if name in packed))
        return real(node, inits, new_inits, *rest)

    monkeypatch.setattr(cmp, "_node_to_qdq", spy)
    if via == "twin":
        assert main(["twin", str(q), "-o", str(tmp_path / "twin.onnx")]) == 0
        onnx.checker.check_model(str(tmp_path / "twin.onnx"))
    else:
        assert compare(src, q).passed
    assert len(held) == len(packed) and held == [0] * len(held)
