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
