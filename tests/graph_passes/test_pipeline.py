"""Whole-model jobs: external data in and out, peak memory, the summary and the JSON report."""

from __future__ import annotations

import io
import json
import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import woq_models as models
from graph_passes import QuantConfig, UserError, inspect_model, quantize_model


def _chain(rng, n_layers=8, width=512):
    """x -> MatMul(w0) -> ... -> MatMul(w_{L-1}); every weight [width, width] float32."""
    inits, nodes, prev = [], [], "x"
    for i in range(n_layers):
        inits.append(numpy_helper.from_array(models.weight(rng, width, width), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        prev = f"h{i}"
    vi = helper.make_tensor_value_info
    return models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", width])],
                             [vi(prev, TensorProto.FLOAT, ["B", width])], inits)


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_external_data_in_and_out(rng, tmp_path, fmt):
    src = tmp_path / "src"
    src.mkdir()
    model = _chain(rng, n_layers=3, width=256)
    on_disk = onnx.ModelProto()
    on_disk.CopyFrom(model)  # save_model moves the data of the proto it saves to the external file
    onnx.save_model(on_disk, src / "m.onnx", save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    out = tmp_path / "out" / "q.onnx"
    out.parent.mkdir()
    report = quantize_model(str(src / "m.onnx"), str(out), QuantConfig(format=fmt, group_size=64))
    assert report.external_data and (out.parent / "q.onnx.data").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["q.onnx", "q.onnx.data"]  # no temporary left
    # Whoever may read the model may read its data (onnx creates the data file for its owner only).
    assert (out.parent / "q.onnx.data").stat().st_mode & 0o777 == (out).stat().st_mode & 0o777
    loaded = onnx.load(str(out), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in loaded.graph.initializer)
    onnx.checker.check_model(str(out))
    x = rng.standard_normal((2, 256)).astype(np.float32)
    full = onnx.load(str(out))
    y = models.ref_run(full, {"x": x})[0] if fmt == "plugin" else models.ort_run(full, {"x": x})[0]
    y0 = models.ort_run(model, {"x": x})[0]
    assert np.linalg.norm(y - y0) / np.linalg.norm(y0) < 0.5  # three INT4 layers; sanity only


def test_peak_memory_near_one_weight_plus_packed(rng, tmp_path):
    # 16 weights of 1 MiB (float32 512 x 512) in external data; numpy allocations are traced by tracemalloc.
    model = _chain(rng, n_layers=16, width=512)
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    del model
    total = 16 * 512 * 512 * 4
    tracemalloc.start()
    try:
        quantize_model(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), QuantConfig(bits=4, group_size=128))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One float weight and the quantizer's temporaries (~8 copies of a 1 MiB weight), plus the packed weights
    # (1/8 of the total) twice while the output is serialized: far below all weights in memory at once.
    print(f"peak traced {peak / 2**20:.1f} MiB for {total / 2**20:.0f} MiB of float weights")
    assert peak < 0.75 * total, (peak, total)


def test_summary_and_json_report(rng, tmp_path):
    path = tmp_path / "mixed.onnx"
    onnx.save(models.mixed(rng, nan=True), path)
    report = quantize_model(str(path), str(tmp_path / "q.onnx"), QuantConfig(group_size=64),
                            report_path=str(tmp_path / "r.json"))
    text = report.format()
    assert "rewritten: 1 node(s)" in text and "skipped:   3 node(s)" in text and "NaN/Inf in weight: nan_node" in text
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["summary"]["rewritten"] == 1 and data["summary"]["skipped_by_reason"]["NaN/Inf in weight"] == 1
    assert data["weight_bytes_before"] == 128 * 64 * 4 and data["weight_bytes_after"] > 0
    assert data["config"]["bits"] == 4 and data["config"]["format"] == "plugin"
    assert 0 < data["rewritten"][0]["weight_rel_error"] < 0.5 and "weight quantization error (relative RMS)" in text
    assert "error:" not in text  # the statistic must not read as a failure


def test_summary_and_json_report_name_every_option_that_shapes_the_model(rng, tmp_path):
    """A W8A8 model's summary says W8A8 (and how), not just "INT8"; the JSON config holds the same options."""
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(rng), path)
    x = rng.standard_normal((4, 1, 5, 128)).astype(np.float32)
    config = QuantConfig(bits=8, group_size=64, act_mode="w8a8", act_asymmetric=True, smooth_alpha=0.5,
                         fuse_activations=False)
    report = quantize_model(str(path), str(tmp_path / "q.onnx"), config, report_path=str(tmp_path / "r.json"),
                            calib_feeds=[{"x": s} for s in x])
    options = next(line for line in report.format().splitlines() if line.startswith("options:"))
    assert options.split(None, 1)[1] == ("INT8 g64 symmetric format=plugin act_dtype=fp16 method=rtn act_mode=w8a8 "
                                         "act_asymmetric smooth_alpha=0.5 no-fuse-activations")
    saved = json.loads((tmp_path / "r.json").read_text())["config"]
    assert (saved["act_mode"], saved["act_asymmetric"], saved["smooth_alpha"], saved["fuse_activations"],
            saved["method"]) == ("w8a8", True, 0.5, False, "rtn")
    plain = inspect_model(str(path), QuantConfig()).format()
    assert "options:   INT4 g128 symmetric format=plugin act_dtype=fp16 method=rtn\n" in plain


def test_inspect_reads_no_weights(rng, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(models.shared(rng), path)
    report = inspect_model(str(path), QuantConfig())
    assert [r.shared for r in report.rewritten] == [False, True] and not report.skipped


def test_only_unquantizable_nodes_is_an_error(rng, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(models.mlp(rng, k=128, hidden=192), path)  # fc1: N=192 fine; fc2: K=192 not a multiple of 128
    with pytest.raises(UserError, match="no node can be quantized .*; `inspect .*m.onnx` with the same options"):
        quantize_model(str(path), str(tmp_path / "q.onnx"), QuantConfig(include=("fc2",)))
    assert not (tmp_path / "q.onnx").exists()


_RSS_SCRIPT = r"""
import sys
import graph_passes, onnx, onnx_graphsurgeon, onnxruntime  # noqa: F401  (imports before the baseline)
from graph_passes import QuantConfig, quantize_model

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

base = status("VmRSS:")
quantize_model(sys.argv[1], sys.argv[2], QuantConfig(bits=4, group_size=128))
print(status("VmHWM:") - base)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc for the peak RSS")
def test_peak_rss_with_external_data(rng, tmp_path):
    # Resident memory, protobuf included: 16 weights of 4 MiB (float32 1024 x 1024) stored as external data.
    import subprocess
    import sys

    model = _chain(rng, n_layers=16, width=1024)
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    del model
    total = 16 * 1024 * 1024 * 4
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx")],
                         capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert res.returncode == 0, res.stderr
    growth = int(res.stdout.strip().splitlines()[-1])
    print(f"peak RSS growth {growth / 2**20:.1f} MiB for {total / 2**20:.0f} MiB of float weights")
    assert growth < 0.75 * total, (growth, total)


def test_large_output_uses_external_data(rng, tmp_path, monkeypatch):
    import graph_passes.pipeline as pipeline

    path = tmp_path / "m.onnx"
    onnx.save(models.mlp(rng), path)  # embedded weights
    monkeypatch.setattr(pipeline, "EXTERNAL_DATA_THRESHOLD", 1024)  # stand-in for the 2 GB protobuf limit
    report = quantize_model(str(path), str(tmp_path / "q.onnx"), QuantConfig())
    assert report.external_data and (tmp_path / "q.onnx.data").is_file()
    onnx.checker.check_model(str(tmp_path / "q.onnx"))


def test_failed_write_leaves_nothing(rng, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(models.mlp(rng), path)

    def broken_save(model, f, *args, **kwargs):
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(onnx, "save_model", broken_save)
    with pytest.raises(UserError, match="disk full"):
        quantize_model(str(path), str(tmp_path / "q.onnx"), QuantConfig())
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]


def test_qdq_notes_for_tensorrt(rng, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(models.mlp(rng), path)
    assert not inspect_model(str(path), QuantConfig(format="qdq")).notes
    notes = inspect_model(str(path), QuantConfig(format="qdq", bits=8, group_size=64, asymmetric=True)).notes
    assert len(notes) == 2 and all("TensorRT" in n for n in notes)
    assert not inspect_model(str(path), QuantConfig(format="plugin", bits=8, group_size=64, asymmetric=True)).notes


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [False, True])
def test_progress_bar_or_log(tty):
    from graph_passes.progress import ProgressBar

    stream = _Stream(tty)
    bar = ProgressBar(25, label="quantizing INT4", stream=stream)
    for i in range(25):
        bar.update(f"node{i}")
    text = stream.getvalue()
    if tty:  # tqdm redraws one line in place
        assert "\r" in text and "25/25" in text and "node24" in text
    else:  # one line per tenth of the work, nothing redrawn
        lines = text.splitlines()
        assert "\r" not in text and 10 <= len(lines) <= 11, lines
        assert lines[-1].startswith("quantizing INT4 [25/25] 100%") and lines[-1].endswith("node24")
    quiet = _Stream(tty)
    ProgressBar(3, stream=quiet, enabled=False).update("x")
    assert quiet.getvalue() == ""


def test_external_data_of_attributes_is_copied(rng, tmp_path):
    # A Constant node's value stored as external data (onnx's convert_attribute) must reach the output's data file.
    from onnx import numpy_helper

    k = 128
    c = (rng.standard_normal((1, k)) * 0.1).astype(np.float32)
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Constant", [], ["c"], name="const", value=numpy_helper.from_array(c, "c_value")),
             helper.make_node("Add", ["x", "c"], ["h"], name="add"),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="mm")]
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", k])], [vi("y", TensorProto.FLOAT, ["B", k])],
                              [numpy_helper.from_array(models.weight(rng, k, k), "w")])
    (tmp_path / "src").mkdir()
    on_disk = onnx.ModelProto()
    on_disk.CopyFrom(model)
    onnx.save_model(on_disk, tmp_path / "src" / "m.onnx", save_as_external_data=True, location="m.data",
                    size_threshold=0, convert_attribute=True)
    assert onnx.load(str(tmp_path / "src" / "m.onnx"), load_external_data=False).graph.node[0].attribute[0].t \
        .data_location == TensorProto.EXTERNAL
    quantize_model(str(tmp_path / "src" / "m.onnx"), str(tmp_path / "q.onnx"), QuantConfig(format="qdq"))
    onnx.checker.check_model(str(tmp_path / "q.onnx"))
    x = rng.standard_normal((2, k)).astype(np.float32)
    y = models.ort_run(onnx.load(str(tmp_path / "q.onnx")), {"x": x})[0]
    y0 = models.ort_run(model, {"x": x})[0]
    assert np.linalg.norm(y - y0) / np.linalg.norm(y0) < 0.2


TORCH_LIB = "pkg.onnxscript.torch_lib"


def _check_conv_then_local_function(rng, fmt, function):
    """A conv (opset 18) whose output goes through the model-local ``function`` (domain TORCH_LIB): quantized, the
    function is still there, the output passes onnx.checker and computes what the original did (INT8 per channel)."""
    from graph_passes.compare import plugin_to_qdq

    model = models.conv(rng, opset=18)
    model.graph.node[0].output[0] = "c"
    model.graph.node.append(helper.make_node(function.name, ["c"], ["y"], name="act", domain=TORCH_LIB))
    model.opset_import.append(helper.make_opsetid(TORCH_LIB, 1))
    model.functions.append(function)
    onnx.checker.check_model(model, full_check=True)
    out, report = models.run_pass(model, bits=8, group_size=-1, format=fmt)
    assert [r.node for r in report.rewritten] == ["conv"]
    assert [f.name for f in out.functions] == [function.name]
    onnx.checker.check_model(out, full_check=fmt == "qdq")
    x = rng.standard_normal((2, 64, 9, 11)).astype(np.float32)
    y = models.ort_run(plugin_to_qdq(out) if fmt == "plugin" else out, {"x": x})[0].astype(np.float64)
    y0 = models.ort_run(model, {"x": x})[0].astype(np.float64)
    assert np.linalg.norm(y - y0) <= 0.02 * np.linalg.norm(y0)


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_local_functions_survive_the_opset_conversion(rng, fmt):
    """torch 2's dynamo exporter writes activations as model-local functions (aten_silu) at opset 18: converting
    the model to opset 21 must keep them, or the nodes calling them point at nothing."""
    silu = helper.make_function(TORCH_LIB, "aten_silu", ["self"], ["ret"],
                                [helper.make_node("Sigmoid", ["self"], ["s"]),
                                 helper.make_node("Mul", ["self", "s"], ["ret"])], [helper.make_opsetid("", 18)])
    _check_conv_then_local_function(rng, fmt, silu)


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_opset_conversion_keeps_the_interface(rng, fmt):
    # Unnamed dynamic dims (neither dim_value nor dim_param): onnx's version converter infers shapes and names them
    # "unk__0"; the quantized model must declare its inputs and outputs exactly as the original does.
    vi = helper.make_tensor_value_info
    model = models.make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                              [vi("x", TensorProto.FLOAT, [None, "S", 128])],
                              [vi("y", TensorProto.FLOAT, [None, "S", 64])],
                              [numpy_helper.from_array(models.weight(rng, 128, 64), "w")], opset=17)
    out, report = models.run_pass(model, format=fmt)
    assert report.rewritten and any("converted the model from opset 17" in n for n in report.notes)
    assert list(out.graph.input) == list(model.graph.input)
    assert list(out.graph.output) == list(model.graph.output)


def test_rank_of_an_undeclared_activation_is_inferred(rng, tmp_path):
    # x [B, 128] -> ReduceSum over B -> r [128] -> MatMul: a rank-1 activation that no value_info declares. The op
    # takes rank >= 2 only, so the node must be skipped for its rank, as when the shape is declared; mm2 is rewritten.
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["r"], name="sum", keepdims=0),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="mm"),
             helper.make_node("MatMul", ["x", "w"], ["z"], name="mm2")]
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128])],
                              [vi("y", TensorProto.FLOAT, [None]), vi("z", TensorProto.FLOAT, ["B", None])],
                              [numpy_helper.from_array(models.weight(rng, 128, 64), "w"),
                               numpy_helper.from_array(np.array([0], np.int64), "axes")], opset=21)
    out, report = models.run_pass(model)
    assert [r.node for r in report.rewritten] == ["mm2"]
    assert [(s.node, s.reason) for s in report.skipped] == [("mm", "activation rank < 2")]
    assert list(out.graph.input) == list(model.graph.input) and list(out.graph.output) == list(model.graph.output)
    onnx.save(model, tmp_path / "m.onnx")
    inspected = inspect_model(str(tmp_path / "m.onnx"), QuantConfig())
    assert [(s.node, s.reason) for s in inspected.skipped] == [("mm", "activation rank < 2")]


def test_model_bytes_count_constant_nodes_and_subgraph_initializers(rng, tmp_path):
    """The summary's "model: A -> B" counts every constant tensor: Constant nodes' values and the initializers of
    If branches too, not only the main graph's initializers (else the model seems to grow when quantized)."""
    vi = helper.make_tensor_value_info
    w_const, w_branch = models.weight(rng, 128, 128), models.weight(rng, 128, 128)
    branch = helper.make_graph([helper.make_node("MatMul", ["h", "wb"], ["t"], name="branch_mm")], "then", [],
                               [vi("t", TensorProto.FLOAT, None)],
                               initializer=[numpy_helper.from_array(w_branch, "wb")])
    other = helper.make_graph([helper.make_node("Identity", ["h"], ["e"], name="else_id")], "else", [],
                              [vi("e", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Constant", [], ["wc"], name="c", value=numpy_helper.from_array(w_const)),
             helper.make_node("MatMul", ["x", "wc"], ["h"], name="mm"),
             helper.make_node("If", ["flag"], ["y"], name="If_0", then_branch=branch, else_branch=other)]
    model = models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128]), vi("flag", TensorProto.BOOL, [])],
                              [vi("y", TensorProto.FLOAT, ["B", 128])], [], opset=21)
    onnx.save(model, tmp_path / "m.onnx")
    report = quantize_model(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), QuantConfig(bits=8, group_size=-1))
    assert len(report.rewritten) == 2
    assert report.model_bytes_before == 2 * 128 * 128 * 4
    assert report.model_bytes_before / 4 < report.model_bytes_after < report.model_bytes_before / 3.5  # INT8 + scales


def test_shape_inference_sees_no_weight_data(rng, monkeypatch):
    """Shape inference copies the model it gets: it must get a skeleton without the weights' bytes, so that a model
    stored inside the protobuf is not held twice; the shapes it finds still reach the model (r below: rank 1)."""
    from graph_passes.pipeline import with_inferred_shapes

    model = _chain(rng, n_layers=4, width=256)
    model.graph.node.extend([helper.make_node("ReduceSum", ["h3", "axes"], ["r"], name="sum", keepdims=0)])
    model.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    seen = []
    real = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda m, *a, **k: seen.append(m.ByteSize()) or
                        real(m, *a, **k))
    out = with_inferred_shapes(model)
    assert seen and seen[0] < 64 * 1024 < model.ByteSize()  # 4 weights of 256 KiB
    assert [len(v.type.tensor_type.shape.dim) for v in out.graph.value_info if v.name == "r"] == [1]


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_local_functions_are_converted_with_the_model(rng, fmt):
    """A model-local function of an opset-18 model using ops whose schema changed before opset 21 (torch_lib's
    aten_gelu: Constant and CastLike) is converted along with the model: the output passes onnx.checker, whose
    function check refuses a function importing opset 18 in a model of opset 21, and computes what it did."""
    mk = helper.make_node

    def const(name, v):
        return [mk("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.float32))),
                mk("CastLike", [name, "self"], [f"{name}_c"])]

    body = [*const("sqrt2", 1.4142135623730951), mk("Div", ["self", "sqrt2_c"], ["d"]), mk("Erf", ["d"], ["e"]),
            *const("one", 1.0), mk("Add", ["e", "one_c"], ["a"]), mk("Mul", ["self", "a"], ["m"]),
            *const("half", 0.5), mk("Mul", ["half_c", "m"], ["ret"])]
    gelu = helper.make_function(TORCH_LIB, "aten_gelu", ["self"], ["ret"], body, [helper.make_opsetid("", 18)])
    _check_conv_then_local_function(rng, fmt, gelu)
