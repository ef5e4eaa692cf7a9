"""Statistics from ONNX Runtime runs, AWQ's graph edit and the memory bounds of calibration."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from onnx import TensorProto, helper, numpy_helper

import calib_models
import subgraph_models
from graph_passes.calibration.collect import collect, plan_passes
from graph_passes.calibration.methods import calibrate
from graph_passes.calibration.stats import TensorStats
from graph_passes.config import QuantConfig
from graph_passes.report import QuantReport
from woq_models import make_model, ort_run


def test_collect_matches_numpy_and_does_not_depend_on_the_grouping(rng):
    """The statistics of the LayerNormalization output equal numpy's from ORT's own values, and gathering two
    tensors together or in separate runs gives identical statistics (row samples included)."""
    model = calib_models.block(rng)
    x = calib_models.samples(rng, 5, seq=9)
    feeds = [{"x": xi} for xi in x]
    seeds = {"h": 0, "s": 1}
    one = collect(model, {"h": 128, "s": 128}, feeds, max_rows=16, seeds=seeds)
    apart = [collect(model, {n: 128}, feeds, max_rows=16, seeds=seeds) for n in ("h", "s")]
    assert one.samples == 5 and one.tokens == 45
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([onnx.ValueInfoProto(name="h")])
    h = np.concatenate([ort_run(probe, f)[-1].reshape(-1, 128) for f in feeds]).astype(np.float64)
    np.testing.assert_allclose(one.stats["h"].gram, h.T @ h, rtol=1e-6)
    np.testing.assert_allclose(one.stats["h"].abs_mean, np.abs(h).mean(axis=0), rtol=1e-6)
    for name, data in zip(("h", "s"), apart):
        np.testing.assert_array_equal(one.stats[name].gram, data.stats[name].gram)
        np.testing.assert_array_equal(one.stats[name].rows, data.stats[name].rows)


def _bodies(rng, k: int = 64):
    """x [B, S, K], flag -> If(flag: then t = 2x, t @ wa | else e = x + 1, e @ wb) -> h; then a Loop of 3 iterations
    carrying c = h: c <- tanh(c @ wl) (c is the body's input, read by the MatMul). Outputs the loop's final c."""
    vi = helper.make_tensor_value_info
    mk = helper.make_node
    wa, wb, wl = ((rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32) for _ in range(3))
    branch = {b: helper.make_graph([mk(op, ["x", f"{b}_c"], [f"{b}_t"], name=f"{b}_pre"),
                                     mk("MatMul", [f"{b}_t", f"{b}_w"], [f"{b}_y"], name=f"{b}_mm")], b, [],
                                    [vi(f"{b}_y", TensorProto.FLOAT, None)],
                                    initializer=[numpy_helper.from_array(np.float32(c), f"{b}_c"),
                                                 numpy_helper.from_array(w, f"{b}_w")])
              for b, op, c, w in (("then", "Mul", 2.0, wa), ("else", "Add", 1.0, wb))}
    body = helper.make_graph([mk("Identity", ["cond_in"], ["cond_out"], name="keep"),
                              mk("MatMul", ["c_in", "wl"], ["c_mm"], name="loop_mm"),
                              mk("Tanh", ["c_mm"], ["c_out"], name="loop_tanh")], "body",
                             [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                              vi("c_in", TensorProto.FLOAT, None)],
                             [vi("cond_out", TensorProto.BOOL, []), vi("c_out", TensorProto.FLOAT, None)])
    nodes = [mk("If", ["flag"], ["h"], name="if", then_branch=branch["then"], else_branch=branch["else"]),
             mk("Loop", ["trips", "", "h"], ["c"], name="loop", body=body)]
    inits = [numpy_helper.from_array(wl, "wl"), numpy_helper.from_array(np.array(3, np.int64), "trips")]
    model = make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", "S", k]), vi("flag", TensorProto.BOOL, [])],
                       [vi("c", TensorProto.FLOAT, ["B", "S", k])], inits)
    return model, wa, wb, wl


def test_collect_reaches_if_branches_and_loop_bodies(rng):
    """Inputs of linears inside If branches and a Loop body (a body input, read on every iteration) are gathered:
    a branch counts the rows of the samples that take it, the loop body those of every iteration; the values equal
    numpy's."""
    model, wa, wb, wl = _bodies(rng)
    xs = [rng.standard_normal((1, 5, 64)).astype(np.float32) for _ in range(3)]
    flags = [True, False, True]
    feeds = [{"x": x, "flag": np.array(f)} for x, f in zip(xs, flags)]
    data = collect(model, {"then_t": 64, "else_t": 64, "c_in": 64}, feeds, max_rows=0)
    then_rows = np.concatenate([2 * x.reshape(-1, 64) for x, f in zip(xs, flags) if f]).astype(np.float64)
    else_rows = np.concatenate([x.reshape(-1, 64) + 1 for x, f in zip(xs, flags) if not f]).astype(np.float64)
    loop_rows = []
    for x, f in zip(xs, flags):
        c = (2 * x @ wa if f else (x + 1) @ wb).astype(np.float64)
        for _ in range(3):
            loop_rows.append(c.reshape(-1, 64))
            c = np.tanh(c @ wl)
    loop_rows = np.concatenate(loop_rows)
    for name, rows in (("then_t", then_rows), ("else_t", else_rows), ("c_in", loop_rows)):
        st = data.stats[name]
        assert st.n_rows == rows.shape[0], name
        np.testing.assert_allclose(st.gram, rows.T @ rows, rtol=1e-4, atol=1e-4 * np.abs(rows.T @ rows).max())
        np.testing.assert_allclose(st.abs_mean, np.abs(rows).mean(axis=0), rtol=1e-4)


def test_collect_reaches_a_loop_body_whose_input_grows(rng):
    """A Loop body whose linear reads the carried c [t, K] that grows each iteration (c <- concat(c, tanh(c @ W))), as
    a generation loop without a cache does: the iterations' rows are gathered although their shapes differ (a scan
    output would need one shape), and the model runs as it did."""
    vi = helper.make_tensor_value_info
    mk = helper.make_node
    k = 64
    wl = (rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32)
    body = helper.make_graph([mk("Identity", ["cond_in"], ["cond_out"], name="keep"),
                              mk("MatMul", ["c_in", "wl"], ["c_mm"], name="loop_mm"),
                              mk("Tanh", ["c_mm"], ["t"], name="loop_tanh"),
                              mk("Concat", ["c_in", "t"], ["c_out"], name="grow", axis=0)], "body",
                             [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                              vi("c_in", TensorProto.FLOAT, None)],
                             [vi("cond_out", TensorProto.BOOL, []), vi("c_out", TensorProto.FLOAT, None)])
    model = make_model([mk("Loop", ["trips", "", "x"], ["c"], name="loop", body=body)],
                       [vi("x", TensorProto.FLOAT, ["S", k])], [vi("c", TensorProto.FLOAT, ["N", k])],
                       [numpy_helper.from_array(wl, "wl"), numpy_helper.from_array(np.array(3, np.int64), "trips")])
    xs = [rng.standard_normal((s, k)).astype(np.float32) for s in (2, 5)]
    data = collect(model, {"c_in": k}, [{"x": x} for x in xs], max_rows=0)
    rows = []
    for x in xs:
        c = x.astype(np.float64)
        for _ in range(3):
            rows.append(c)
            c = np.concatenate([c, np.tanh(c @ wl)])
    rows = np.concatenate(rows)
    st = data.stats["c_in"]
    assert st.n_rows == rows.shape[0] == (2 + 5) * (1 + 2 + 4)
    np.testing.assert_allclose(st.gram, rows.T @ rows, rtol=1e-4, atol=1e-4 * np.abs(rows.T @ rows).max())
    np.testing.assert_allclose(st.abs_mean, np.abs(rows).mean(axis=0), rtol=1e-4)


def test_combined_row_sample_follows_each_part_share_of_rows(rng):
    """Pooling the statistics of activations read through one weight (a merged decoder's two branches): the row
    sample for AWQ's search draws from each part in proportion to its rows, as one uniform sample of all rows
    would, and keeps at most max_rows; sums and counts add up."""
    a, b = (TensorStats(8, gram=True, max_rows=256, seed=s) for s in (0, 1))
    xa = rng.standard_normal((5000, 8)).astype(np.float32)
    xb = rng.standard_normal((500, 8)).astype(np.float32) + 100.0
    a.update(xa)
    b.update(xb)
    c = TensorStats.combine([a, b])
    assert c.n_rows == 5500 and c.rows.shape == (256, 8)
    from_b = int((c.rows[:, 0] > 50).sum())
    assert abs(from_b - 256 * 500 / 5500) <= 1, from_b
    assert set(map(bytes, c.rows[c.rows[:, 0] > 50])) <= set(map(bytes, xb))
    rows = np.concatenate([xa, xb]).astype(np.float64)
    np.testing.assert_allclose(c.gram, rows.T @ rows, rtol=1e-6)
    np.testing.assert_allclose(c.abs_mean, np.abs(rows).mean(axis=0), rtol=1e-6)


def test_plan_passes():
    assert plan_passes({"a": 5, "b": 5, "c": 20, "d": 1}, 10) == [["a", "b"], ["c"], ["d"]]


def test_awq_edit_keeps_the_float_function():
    """AWQ's graph edit alone (weights times s, 1/s folded or multiplied) leaves every output as it was."""
    # A fixed seed: on some random draws the alpha search keeps `up` unscaled (alpha 0), so no Mul is inserted and
    # the three edit kinds this test checks are not all exercised.
    rng = np.random.default_rng(0)
    model = calib_models.block(rng)
    config = QuantConfig(method="awq")
    report = QuantReport()
    feeds = [{"x": x} for x in calib_models.samples(rng, 8)]
    config.calibration = calibrate(model, config, feeds, base_dir=None, report=report, budget=100_000)
    assert len(config.calibration.plan) == 3  # AWQ's search goes pass by pass too
    graph = gs.import_onnx(model)
    config.calibration.prepare(graph, config, report)
    edited = gs.export_onnx(graph.cleanup().toposort())
    assert len(config.calibration.folds) == 3, report.notes
    assert sum(n.op_type == "Mul" for n in edited.graph.node) == 1
    x = calib_models.samples(rng, 1, seq=11)[0]
    for a, b in zip(ort_run(model, {"x": x}), ort_run(edited, {"x": x})):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5 * np.abs(a).max())



def test_awq_edit_keeps_the_float_function_with_a_weight_read_twice():
    """d = z @ Wc and c = (x @ W1) @ Wc: Wc's two inputs z and y = x @ W1 get one AWQ scale (one weight), and y's 1/s
    goes into W1's columns before x's own scale multiplies W1's rows: both edits stay in W1, and each output is
    what it was. Outlier channels in x and z make both scales non-trivial."""
    rng = np.random.default_rng(0)
    k = 128
    w1, wc = ((rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32) for _ in range(2))
    mk = helper.make_node
    vi = helper.make_tensor_value_info
    nodes = [mk("MatMul", ["z", "wc"], ["d"], name="d"), mk("MatMul", ["x", "w1"], ["y"], name="p"),
             mk("MatMul", ["y", "wc"], ["c"], name="c")]
    model = make_model(nodes, [vi("z", TensorProto.FLOAT, ["S", k]), vi("x", TensorProto.FLOAT, ["S", k])],
                       [vi("d", TensorProto.FLOAT, ["S", k]), vi("c", TensorProto.FLOAT, ["S", k])],
                       [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(wc, "wc")])
    gain = np.ones(k, np.float32)
    gain[rng.choice(k, 6, replace=False)] = 30.0

    def feed():
        return {"z": rng.standard_normal((32, k)).astype(np.float32) * gain,
                "x": rng.standard_normal((32, k)).astype(np.float32) * gain[::-1]}

    config = QuantConfig(method="awq", bits=4, group_size=32)
    report = QuantReport()
    config.calibration = calibrate(model, config, [feed() for _ in range(4)], base_dir=None, report=report)
    graph = gs.import_onnx(model)
    config.calibration.prepare(graph, config, report)
    edited = gs.export_onnx(graph.cleanup().toposort())
    notes = " | ".join(report.notes)
    assert "c: 1/s folded into MatMul 'p' (weight columns)" in notes and "p: 1/s folded into a new Mul" in notes, notes
    f = feed()
    for a, b in zip(ort_run(model, f), ort_run(edited, f)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())


def test_awq_edit_inside_if_branches_keeps_the_float_function(rng):
    """The merged decoder: AWQ's Muls go into the branch that makes each activation, the weights the two branches
    share stay one constant each, and both branches compute what they did."""
    model = subgraph_models.merged_decoder(rng)
    feeds = [{"x": rng.standard_normal((1, 8, 128)).astype(np.float32), "use_cache_branch": np.array(i % 2 == 0)}
             for i in range(6)]
    config = QuantConfig(method="awq", bits=4, group_size=32)
    report = QuantReport()
    config.calibration = calibrate(model, config, feeds, base_dir=None, report=report)
    graph = gs.import_onnx(model)
    config.calibration.prepare(graph, config, report)
    edited = gs.export_onnx(graph.cleanup().toposort())
    onnx.checker.check_model(edited, full_check=True)
    assert config.calibration.folds, report.notes
    weights = {n.inputs[1].name for g in [graph, *graph.subgraphs(recursive=True)] for n in g.nodes
               if n.op == "MatMul" and n.name.endswith("fc1")}
    assert len(weights) == 1, weights
    for flag in (True, False):
        feed = {"x": rng.standard_normal((2, 5, 128)).astype(np.float32), "use_cache_branch": np.array(flag)}
        ref, got = ort_run(model, feed)[0], ort_run(edited, feed)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_awq_edit_on_the_llama_sample_folds_into_rmsnorm(dtype):
    """The Llama-style sample: q/k/v's and gate/up's 1/s go into the RMSNorm weights (behind the Cast of an fp16
    graph), o_proj and down_proj get a Mul of the graph's dtype, and the float outputs do not change."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "samples" / "llama" / "build_model.py"
    spec = importlib.util.spec_from_file_location("llama_build_model", path)  # samples/transformer has one too
    llama = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(llama)
    model = llama.build(hidden=256, intermediate=512, layers=1, heads=4, vocab=512, dtype=dtype, max_seq=64)
    ids = np.random.default_rng(0).integers(0, 512, (6, 1, 16))
    config = QuantConfig(method="awq")
    report = QuantReport()
    config.calibration = calibrate(model, config, [{"input_ids": i} for i in ids], base_dir=None, report=report)
    graph = gs.import_onnx(model)
    config.calibration.prepare(graph, config, report)
    edited = gs.export_onnx(graph.cleanup().toposort())
    notes = " | ".join(report.notes)
    assert "v_proj: 1/s folded into Mul 'layers.0.input_layernorm.scale' (constant)" in notes, notes
    assert "up_proj: 1/s folded into Mul 'layers.0.post_attention_layernorm.scale' (constant)" in notes, notes
    assert "lm_head: 1/s folded into Mul 'norm.scale' (constant)" in notes, notes
    assert "o_proj: 1/s folded into a new Mul" in notes, notes
    feed = {"input_ids": ids[0]}
    ref, got = ort_run(model, feed)[0].astype(np.float64), ort_run(edited, feed)[0].astype(np.float64)
    tol = 2e-5 if dtype == "fp32" else 2e-2
    np.testing.assert_allclose(got, ref, atol=tol * np.abs(ref).max())


def _chain(rng, k: int, layers: int):
    """x [1, S, K] -> ``layers`` x (MatMul [K, K] -> Relu): a model of ``layers`` * 4 K^2 bytes of weights."""
    nodes, inits, t = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((k, k)) / np.sqrt(k)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [t, f"w{i}"], [f"m{i}"], name=f"fc{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"a{i}"], name=f"relu{i}")]
        t = f"a{i}"
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [1, "S", k])], [vi(t, TensorProto.FLOAT, [1, "S", k])],
                      inits)


def test_gptq_statistics_are_held_one_pass_at_a_time(rng):
    """With a budget of two Gram matrices, GPTQ's statistics of six inputs come in three passes as the nodes are
    reached, and what is held at once stays at one pass (tracemalloc sees numpy's buffers)."""
    k, layers = 512, 6
    model = _chain(rng, k, layers)
    feeds = [{"x": rng.standard_normal((1, 32, k)).astype(np.float32)} for _ in range(4)]
    config = QuantConfig(method="gptq")
    gram_bytes = TensorStats.nbytes_for(k, gram=True, max_rows=0)
    report = QuantReport()
    calibration = calibrate(model, config, feeds, base_dir=None, report=report, budget=2 * gram_bytes)
    assert len(calibration.plan) == 3
    tracemalloc.start()
    try:
        for name in ["x"] + [f"a{i}" for i in range(layers - 1)]:
            got = calibration.for_tensor(name)
            assert got.stats.n_rows == 4 * 32 and len(calibration.inputs) <= 2
            del got
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one pass (2 Gram matrices and the product being added) and the serialized model handed to ONNX Runtime;
    # holding all six Gram matrices would add 6.3 MB more
    assert peak < 3 * gram_bytes + model.ByteSize() + (2 << 20), (peak, model.ByteSize())
    assert "calibration: 4 sample(s), 128 token(s) per linear input, statistics in 3 pass(es), method gptq" \
        in report.notes


_RSS_SCRIPT = """
import resource, sys
from graph_passes.__main__ import main
rc = main(sys.argv[1:])
print("maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(rc)
"""


def test_peak_rss_of_a_calibrated_quantize_with_external_data(rng, tmp_path):
    """quantize --method gptq on a model stored with external data: peak RSS <= model size + 2 GB (the issue's
    bound), measured in a fresh process."""
    k, layers = 1024, 8
    model = _chain(rng, k, layers)
    path = tmp_path / "chain.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="chain.onnx.data", size_threshold=0)
    np.savez(tmp_path / "c.npz", x=rng.standard_normal((4, 1, 64, k)).astype(np.float32))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    proc = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, "quantize", str(path), "-o", str(tmp_path / "q.onnx"),
                           "-q", "--method", "gptq", "--calib-data", str(tmp_path / "c.npz")],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    rss = int(proc.stdout.split("maxrss_kib")[1].split()[0]) * 1024
    model_bytes = os.path.getsize(tmp_path / "chain.onnx.data")
    print(f"peak RSS {rss / 2**20:.0f} MiB for a {model_bytes / 2**20:.0f} MiB model")
    assert rss <= model_bytes + (2 << 30)
    assert os.path.exists(tmp_path / "q.onnx.data")
