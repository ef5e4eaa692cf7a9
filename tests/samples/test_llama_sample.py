"""End to end on the bundled sample: build the Llama-style decoder, quantize it with the CLI, compare with the CLI.

Bounds. Round-to-nearest on N(0, s) weights leaves a relative weight error of about step / sqrt(12) / s:
INT8 per channel (K = 512, max ~ 3.3 s, step = max / 127) ~ 0.75 %; INT4 g128 (max ~ 2.6 s, step = max / 7) ~ 11 %.
The sample's 15 quantized projections add such errors; summed as independent variances they predict a logits
cosine of about 0.9996 (INT8) and 0.92 (INT4 g128) — what we measure (0.9993-0.9997 and 0.90-0.96 over input seeds,
see the README). The asserted bounds are the issue's 0.999 for INT8, and for INT4 a cosine of 0.85, i.e. twice the
predicted error variance, plus the ordering INT8 > INT4.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "samples" / "llama" / "build_model.py"

INT8_MIN_COSINE = 0.999
INT4_MIN_COSINE = 0.85


def _run(*args: str, ok_codes=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode in ok_codes, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("llama") / "llama.onnx"
    out = _run(str(BUILD), "-o", str(path)).stdout
    assert "15 projection MatMuls" in out
    return path


def _quantize_and_compare(sample: Path, tag: str, *options: str, min_cosine: float) -> tuple[float, str]:
    quantized = sample.with_name(f"llama.{tag}.onnx")
    report_json = sample.with_name(f"llama.{tag}.json")
    q = _run("-m", "graph_passes", "quantize", str(sample), "-o", str(quantized), "--quiet", "--force",
             "--report", str(report_json), *options)
    assert "rewritten: 15 node(s)" in q.stdout, q.stdout
    report = json.loads(report_json.read_text())
    assert isinstance(report, dict)
    model = onnx.load(str(quantized))
    assert sum(n.op_type == "WeightOnlyLinear" and n.domain == "trt_woq" for n in model.graph.node) == 15
    seed = str(np.random.default_rng().integers(2**31))  # fresh inputs each run
    c = _run("-m", "graph_passes", "compare", str(sample), str(quantized), "--seed", seed,
             "--min-cosine", str(min_cosine), ok_codes=(0, 1))
    lines = c.stdout.strip().splitlines()
    row = next(line for line in lines if line.split() and line.split()[0] == "logits")
    cosine = float(row.split("]", 1)[1].split()[3])  # name, shape, max abs, max rel, mean abs, cosine[, mark]
    print(f"\n{tag}: logits cosine {cosine:.6f} (seed {seed})\n{row}")
    assert lines[-1] == ("PASSED" if cosine >= min_cosine else "FAILED")
    assert c.returncode == (0 if cosine >= min_cosine else 1)
    return cosine, c.stdout


def test_sample_is_valid_and_runs(sample):
    import onnxruntime as ort

    model = onnx.load(str(sample))
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(str(sample), providers=["CPUExecutionProvider"])
    ids = np.random.default_rng().integers(0, 2048, size=(2, 9))
    (logits,) = sess.run(None, {"input_ids": ids})
    assert logits.shape == (2, 9, 2048) and np.isfinite(logits).all() and logits.std() > 0.1
    matmuls = {n.name: n for n in model.graph.node if n.op_type == "MatMul" and n.input[1].endswith(".weight")}
    inits = {t.name: t for t in model.graph.initializer}
    assert len(matmuls) == 15 and "lm_head" in matmuls and "layers.1.mlp.down_proj" in matmuls
    for node in matmuls.values():
        k, n = inits[node.input[1]].dims
        assert k % 128 == 0 and n % 4 == 0, (node.name, k, n)


def test_int8_per_channel(sample):
    cosine, _ = _quantize_and_compare(sample, "int8", "--bits", "8", "--group-size", "-1",
                                      min_cosine=INT8_MIN_COSINE)
    assert cosine >= INT8_MIN_COSINE


@pytest.mark.parametrize("asym", [False, True], ids=["sym", "asym"])
def test_int4_g128(sample, asym):
    options = ["--bits", "4", "--group-size", "128"] + (["--asymmetric"] if asym else [])
    cosine, _ = _quantize_and_compare(sample, "int4_g128" + ("_asym" if asym else ""), *options,
                                      min_cosine=INT4_MIN_COSINE)
    assert INT4_MIN_COSINE <= cosine < INT8_MIN_COSINE


@pytest.mark.parametrize("group", ["-1", "128"])
def test_fp6_passes_compare_default_threshold(sample, group):
    """`quickstart.sh --bits 6 ...`: FP6 (between INT4 and INT8 in accuracy) passes compare's default threshold for
    6-bit weights on fresh inputs, as INT8 and INT4 pass theirs."""
    quantized = sample.with_name(f"llama.fp6_{group}_default.onnx")
    _run("-m", "graph_passes", "quantize", str(sample), "-o", str(quantized), "-q", "--force", "--bits", "6",
         "--group-size", group)
    seed = str(np.random.default_rng().integers(2**31))
    c = _run("-m", "graph_passes", "compare", str(sample), str(quantized), "--seed", seed, ok_codes=(0, 1))
    assert "(default for 6-bit weights; --min-cosine overrides)" in c.stdout
    assert c.returncode == 0 and c.stdout.strip().splitlines()[-1] == "PASSED", f"seed {seed}\n{c.stdout}"


def test_compare_exit_code_when_bound_not_met(sample):
    """--min-cosine above what INT4 reaches: FAILED and exit status 1."""
    cosine, out = _quantize_and_compare(sample, "int4_strict", "--bits", "4", min_cosine=0.9999)
    assert cosine < 0.9999 and out.strip().splitlines()[-1] == "FAILED"


@pytest.mark.parametrize("options", [["--dtype", "fp16", "--kv-heads", "4"], ["--input", "hidden", "--no-rotary"]],
                         ids=["fp16-gqa", "hidden-norope"])
def test_sample_variants_are_valid_and_causal(tmp_path, options):
    """Other builder options give valid models; attention is causal (a later position never changes earlier ones)."""
    import onnxruntime as ort

    path = tmp_path / "variant.onnx"
    _run(str(BUILD), "-o", str(path), "--hidden", "256", "--intermediate", "768", "--vocab", "512", *options)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    rng = np.random.default_rng()
    if inp.name == "input_ids":
        x = rng.integers(0, 512, size=(2, 11))
        x2 = x.copy()
        x2[:, -1] = (x2[:, -1] + 1) % 512
    else:
        x = rng.standard_normal((2, 11, 256)).astype(np.float32)
        x2 = x.copy()
        x2[:, -1] += 1.0
    a = sess.run(None, {inp.name: x})[0].astype(np.float64)
    b = sess.run(None, {inp.name: x2})[0].astype(np.float64)
    assert np.isfinite(a).all() and a.shape == (2, 11, 512)
    np.testing.assert_array_equal(a[:, :-1], b[:, :-1])
    assert np.abs(a[:, -1] - b[:, -1]).max() > 1e-3


def test_accuracy_script_is_reproducible_from_its_printed_seed(tmp_path):
    """samples/llama/accuracy.py (the README's accuracy table): the default seed is fixed and printed in the command
    line it prints; the same seed gives the same figures, another seed other figures (the seed reaches the inputs)."""
    model = tmp_path / "tiny.onnx"
    _run(str(BUILD), "-o", str(model), "--hidden", "256", "--intermediate", "768", "--vocab", "512")
    script = str(REPO / "samples" / "llama" / "accuracy.py")
    common = ("--model", str(model), "--seeds", "2", "--configs", "int4-g128")
    default = _run(script, *common).stdout
    explicit = _run(script, "--seed", "0", *common).stdout
    other = _run(script, "--seed", "1", *common).stdout
    assert default.splitlines()[0] == shlex.join(["python3", "samples/llama/accuracy.py", "--seed", "0", "--seeds",
                                                   "2", "--configs", "int4-g128", "--model", str(model)])
    assert "input seeds 0..1" in default and "input seeds 1..2" in other
    assert default == explicit

    def figures(out: str) -> list[float]:
        row = next(line for line in out.splitlines() if line.startswith("INT4 g128"))
        return [float(v) for v in row.split()[2:]]

    assert len(figures(default)) == 4 and figures(default) != figures(other)
