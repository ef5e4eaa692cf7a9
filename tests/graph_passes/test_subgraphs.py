"""Linear layers inside If / Loop / Scan bodies: matched, rewritten, shared weights packed once, compare PASSED."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import subgraph_models as sm
from graph_passes import QuantConfig
from graph_passes.compare import DEFAULT_MIN_COSINE, compare, plugin_to_qdq
from graph_passes.pipeline import inspect_model, quantize_model

from woq_models import ort_run


def _graphs(graph, path=""):
    yield path, graph
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g, f"{path}{node.name}/{a.name}/")


def _feeds(rng, flag):
    return {"x": rng.standard_normal((2, 5, sm.K)).astype(np.float32), "use_cache_branch": np.array(flag)}


@pytest.fixture
def decoder(tmp_path, rng):
    path = tmp_path / "decoder.onnx"
    onnx.save(sm.merged_decoder(rng), path)
    return path


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_every_linear_in_both_branches_is_rewritten_and_packed_once(tmp_path, rng, decoder, fmt):
    out = tmp_path / f"q_{fmt}.onnx"
    report = quantize_model(str(decoder), str(out), QuantConfig(bits=4, group_size=64, format=fmt))
    assert sorted(r.node for r in report.rewritten) == sorted(sm.LINEARS) and not report.skipped
    # fc1 of the else branch reuses the then branch's packed w1 (or the other way round): one quantization each.
    assert sorted(r.weight for r in report.rewritten if not r.shared) == ["w1", "w2", "w2t", "w3", "wl"]

    q = onnx.load(out)
    onnx.checker.check_model(q, full_check=True)
    graphs = list(_graphs(q.graph))
    assert sorted(p for p, _ in graphs) == ["", "If_0/else_branch/", "If_0/then_branch/",
                                            "If_0/then_branch/If_inner/else_branch/",
                                            "If_0/then_branch/If_inner/then_branch/"]
    # No float MatMul / Gemm reads a weight any more; every quantized tensor is stored once in the whole model.
    inits = [t for _, g in graphs for t in g.initializer]
    names = [t.name for t in inits]
    assert len(names) == len(set(names))
    float_weights = {"w1", "w2", "w2t", "w3", "wl"}
    assert not float_weights & set(names)
    low_bit = [t for t in inits if t.data_type in (onnx.TensorProto.INT32, onnx.TensorProto.INT4)]
    assert len(low_bit) == 5  # w1, w2, w2t, w3, wl: once each, although w1 serves both branches
    ops = [n for _, g in graphs for n in g.node]
    assert not [n for n in ops if n.op_type in ("MatMul", "Gemm") and set(n.input) & float_weights]
    if fmt == "plugin":
        assert sum(n.op_type == "WeightOnlyLinear" for n in ops) == len(sm.LINEARS)
        shared = {n.input[1] for n in ops if n.op_type == "WeightOnlyLinear" and n.name.startswith(("then", "else"))
                  and "fc1" in n.name}
        assert len(shared) == 1 and shared <= {t.name for t in q.graph.initializer}
    else:
        dq = [n for n in q.graph.node if n.op_type == "DequantizeLinear"]
        assert len(dq) == 5 and sum(n.op_type == "DequantizeLinear" for n in ops) == 5

    # Both branches compute what the original computes, within INT4's threshold.
    original = onnx.load(decoder)
    for flag in (True, False):
        feeds = _feeds(rng, flag)
        ref = ort_run(original, feeds)[0].astype(np.float64)
        got = ort_run(plugin_to_qdq(q) if fmt == "plugin" else q, feeds)[0].astype(np.float64)
        cos = float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got))
        assert cos >= DEFAULT_MIN_COSINE[4], (flag, cos)


@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_compare_passes_on_both_branches(tmp_path, decoder, fmt):
    out = tmp_path / f"q_{fmt}.onnx"
    quantize_model(str(decoder), str(out), QuantConfig(bits=8, group_size=-1, format=fmt))
    script = tmp_path / "data.py"
    script.write_text("import numpy as np\n"
                      "def load_data():\n"
                      "    rng = np.random.default_rng(7)\n"
                      f"    return [{{'x': rng.standard_normal((1, 6, {sm.K})).astype(np.float32), "
                      "'use_cache_branch': np.array(f)} for f in (True, False)]\n")
    report = compare(decoder, out, data_script=str(script))
    assert report.samples == 2 and report.min_cosine == 0.999 and report.passed, report.format()


def test_inspect_lists_subgraph_nodes_with_their_path(decoder, capsys):
    from graph_passes.__main__ import main

    report = inspect_model(str(decoder), QuantConfig(group_size=64))
    assert sorted(r.node for r in report.rewritten) == sorted(sm.LINEARS)
    assert main(["inspect", str(decoder), "--group-size", "64"]) == 0
    out = capsys.readouterr().out
    for path in sm.LINEARS:
        assert f"rewrite  {path} [" in out


def test_name_filters_see_the_path(tmp_path, decoder):
    report = quantize_model(str(decoder), str(tmp_path / "q.onnx"), QuantConfig(exclude=("^If_0/then_branch/",)))
    assert sorted(r.node for r in report.rewritten) == ["If_0/else_branch/else_fc1", "If_0/else_branch/else_fc2",
                                                         "lm_head"]
    assert all("--exclude" in s.reason for s in report.skipped) and len(report.skipped) == 4


def test_loop_and_scan_bodies(tmp_path, rng):
    """A MatMul in a Loop body and in a Scan body (both on main-graph weights) is rewritten as well."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    w = sm.weight(rng, 128, 128)
    loop_body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "w"], ["h_out"], name="loop_mm"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "loop_body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("h_in", TensorProto.FLOAT, None)],
        [vi("cond_out", TensorProto.BOOL, []), vi("h_out", TensorProto.FLOAT, None)])
    scan_body = helper.make_graph(
        [helper.make_node("MatMul", ["row", "w"], ["row_out"], name="scan_mm"),
         helper.make_node("Identity", ["s_in"], ["s_out"])], "scan_body",
        [vi("s_in", TensorProto.FLOAT, [1]), vi("row", TensorProto.FLOAT, [None, 128])],
        [vi("s_out", TensorProto.FLOAT, [1]), vi("row_out", TensorProto.FLOAT, [None, 128])])
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["h"], name="Loop_0", body=loop_body),
             helper.make_node("Scan", ["s0", "h"], ["s1", "y"], name="Scan_0", body=scan_body, num_scan_inputs=1)]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [3, 2, 128])],
                              [vi("y", TensorProto.FLOAT, [3, 2, 128])],
                              initializer=[numpy_helper.from_array(w, "w"),
                                           numpy_helper.from_array(np.array(2, np.int64), "trips"),
                                           numpy_helper.from_array(np.zeros(1, np.float32), "s0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "loop.onnx"
    onnx.save(model, path)
    for fmt in ("plugin", "qdq"):
        out = tmp_path / f"loop_{fmt}.onnx"
        report = quantize_model(str(path), str(out), QuantConfig(bits=8, group_size=-1, format=fmt))
        assert sorted(r.node for r in report.rewritten) == ["Loop_0/body/loop_mm", "Scan_0/body/scan_mm"]
        assert compare(path, out).passed


def test_overridable_weight_read_only_in_a_branch_stays_float_and_an_input(tmp_path, rng):
    """An initializer that is also a graph input, used only inside an If branch: skipped, and still a graph input."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    branches = {f"{b}_branch": helper.make_graph([helper.make_node("MatMul", ["x", w], [f"{b}_y"], name=f"{b}_mm")],
                                                 b, [], [vi(f"{b}_y", TensorProto.FLOAT, None)])
                for b, w in (("then", "w"), ("else", "w2"))}
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="If_0", **branches)], "g",
                              [vi("x", TensorProto.FLOAT, ["B", 128]), vi("c", TensorProto.BOOL, []),
                               vi("w", TensorProto.FLOAT, [128, 128])], [vi("y", TensorProto.FLOAT, ["B", 128])],
                              initializer=[numpy_helper.from_array(sm.weight(rng, 128, 128), n) for n in ("w", "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    path, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(model, path)
    report = quantize_model(str(path), str(out), QuantConfig())
    assert [r.node for r in report.rewritten] == ["If_0/else_branch/else_mm"]
    assert [(s.node, s.reason) for s in report.skipped] == [("If_0/then_branch/then_mm",
                                                             "weight is an overridable graph input")]
    q = onnx.load(out)
    assert [i.name for i in q.graph.input] == ["x", "c", "w"]
    assert "w" in {t.name for t in q.graph.initializer}
    feeds = {"x": rng.standard_normal((2, 128)).astype(np.float32), "c": np.array(True),
             "w": rng.standard_normal((128, 128)).astype(np.float32)}  # the caller's own weight is the one used
    np.testing.assert_allclose(ort_run(plugin_to_qdq(q), feeds)[0], feeds["x"] @ feeds["w"], rtol=1e-4, atol=1e-4)


READERS = {"Add": lambda h, b: h + b, "Relu": lambda h, b: np.maximum(h, 0), "Clip": lambda h, b: np.clip(h, -0.5, 0.5)}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("fmt", ["plugin", "qdq"])
def test_reader_in_a_branch_stays_there(tmp_path, rng, fmt, reader):
    """A main-graph MatMul whose only reader (a bias Add, an activation) is inside an If branch: the reader is not
    folded into the node (the branch's output would lose its producer); the model stays valid and computes the same."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    inputs = {"Add": ["h", "b"], "Relu": ["h"], "Clip": ["h", "lo", "hi"]}[reader]
    branches = {"then_branch": helper.make_graph([helper.make_node(reader, inputs, ["t"], name="then_reader")],
                                                 "then", [], [vi("t", TensorProto.FLOAT, None)]),
                "else_branch": helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")],
                                                 "else", [], [vi("e", TensorProto.FLOAT, None)])}
    w, b = sm.weight(rng, 128, 128), (rng.standard_normal(128) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.float32(-0.5), "lo"), numpy_helper.from_array(np.float32(0.5), "hi")]
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                               helper.make_node("If", ["c"], ["y"], name="If_0", **branches)], "g",
                              [vi("x", TensorProto.FLOAT, ["B", 128]), vi("c", TensorProto.BOOL, [])],
                              [vi("y", TensorProto.FLOAT, ["B", 128])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path, out = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(model, path)
    report = quantize_model(str(path), str(out), QuantConfig(bits=8, group_size=-1, format=fmt))
    assert [r.node for r in report.rewritten] == ["mm"] and report.rewritten[0].activation == "none"
    q = onnx.load(out)
    onnx.checker.check_model(q, full_check=True)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    runnable = plugin_to_qdq(q) if fmt == "plugin" else q
    got = ort_run(runnable, {"x": x, "c": np.array(True)})[0].astype(np.float64)
    ref = READERS[reader](x.astype(np.float64) @ w, b)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.02
