"""CPU checks of the plugin conformance harness's inputs and references (the GPU part runs in tests/device/run_all.sh).

* reference.h, the harness's float64 references, against graph_passes (compiled here with g++, skipped without one):
  the W8A8 activation quantization bit for bit against graph_passes/quantizers/activations.py, the conv patches
  exactly against graph_passes.op_conv.im2col, the product and every epilogue against the epilogue registry.
* make_cases.py: the nodes it writes are the op contract's (attributes with their ONNX types, constant inputs in
  order, the float64 weight of the layout's dequantization), the runs fit their profiles and have the op's output
  shape, W8A8 runs follow the W8A8 math exactly above the GEMV's M, and the synthetic matrices cover what the task
  asks (W8A8 symmetric / asymmetric, per channel / grouped; conv geometries, formats and every fused activation).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE))

import make_cases  # noqa: E402
from graph_passes import op as woq_op  # noqa: E402
from graph_passes import op_conv  # noqa: E402
from graph_passes.quantizers.activations import quantize_activations  # noqa: E402
from graph_passes.registry.epilogues import EPILOGUES  # noqa: E402


@pytest.fixture(scope="module")
def reference_tool(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path_factory.mktemp("ref") / "reference_check"
    cmd = [cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-pthread",
           str(HERE / "reference_check.cpp"), "-o", str(exe)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return exe


def _run(tool, *args):
    done = subprocess.run([str(tool), *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("act", ["fp16", "bf16"])
@pytest.mark.parametrize("group", [-1, 32, 128])
@pytest.mark.parametrize("asym", [False, True])
def test_w8a8_quantization_is_activations_py_bit_for_bit(reference_tool, tmp_path, act, group, asym):
    rng = np.random.default_rng()
    m, k = 37, 256
    x = rng.standard_normal((m, k)) * rng.uniform(0.01, 30, size=(m, 1)) + rng.uniform(-3, 3, size=(m, 1))
    x[0] = 0.0            # an all-zero row: s = 0
    x[1] = 1.5            # a constant row: s = 0 when asymmetric
    x[2, ::7] = 1e-4      # tiny values beside large ones
    x32 = make_cases.from_bits(make_cases.to_bits(x, act), act).astype(np.float32)
    x32.tofile(tmp_path / "x.f32")
    block = k if group == -1 else group
    _run(reference_tool, "quantize", m, k, block, int(asym), tmp_path / "x.f32", tmp_path / "y.f64")
    ours = np.fromfile(tmp_path / "y.f64", np.float64).reshape(m, k)
    np.testing.assert_array_equal(ours, quantize_activations(x32, group, asym).dequantize())


@pytest.mark.parametrize("geo", make_cases.CONV_GEOMETRIES, ids=lambda g: f"k{g.kernel}s{g.stride}d{g.dilation}")
@pytest.mark.parametrize("k_order", list(op_conv.K_ORDERS))
def test_im2col_is_op_conv_im2col(reference_tool, tmp_path, geo, k_order):
    rng = np.random.default_rng()
    c = 5  # any channel count: the patches do not depend on the format
    attrs = op_conv.ConvAttributes(bits=8, group_size=-1, in_features=c * geo.kernel ** 2, out_features=2,
                                   in_channels=c, kernel_shape=(geo.kernel,) * 2, strides=(geo.stride,) * 2,
                                   pads=geo.pads, dilations=(geo.dilation,) * 2, k_order=k_order)
    for b, h, w in geo.inputs:
        x = rng.standard_normal((b, c, h, w))
        x.tofile(tmp_path / "x.f64")
        _run(reference_tool, "im2col", b, c, h, w, geo.kernel, geo.kernel, geo.stride, geo.stride, *geo.pads,
             geo.dilation, geo.dilation, k_order, tmp_path / "x.f64", tmp_path / "p.f64")
        expect = op_conv.im2col(x, attrs).reshape(-1, attrs.in_features)
        np.testing.assert_array_equal(np.fromfile(tmp_path / "p.f64").reshape(expect.shape), expect)


@pytest.mark.parametrize("ep", list(EPILOGUES), ids=lambda e: e.name)
def test_product_and_epilogue_are_the_registry_references(reference_tool, tmp_path, ep):
    rng = np.random.default_rng()
    m, k, n = 9, 64, 12
    rows, w, bias = rng.standard_normal((m, k)), rng.standard_normal((k, n)) / 8, rng.standard_normal(n)
    for name, a in (("r", rows), ("w", w), ("b", bias)):
        a.tofile(tmp_path / f"{name}.f64")
    params = make_cases.CLIP if ep.params else {}
    lo, hi = params.get("clip_min", -np.inf), params.get("clip_max", np.inf)
    _run(reference_tool, "product", m, k, n, ep.c_enum, lo, hi, tmp_path / "r.f64", tmp_path / "w.f64",
         tmp_path / "b.f64", tmp_path / "y.f64")
    np.testing.assert_allclose(np.fromfile(tmp_path / "y.f64").reshape(m, n), ep.reference(rows @ w + bias, **params),
                               rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------------------ make_cases.py
def read_case(path: Path) -> dict:
    """The fields of NAME.case the harness reads (plugin_conformance.cpp, loadCase)."""
    case = {"attrs": {}, "inputs": [], "profiles": [], "invalid": []}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(" ")
        words = rest.split()
        if key == "attr":
            case["attrs"][words[1]] = (words[0], words[2:])
        elif key == "input":
            case["inputs"].append((words[0], tuple(int(d) for d in words[1].split("x"))))
        elif key == "profile":
            case["profiles"].append({"need": words[0] == "need", "range": [tuple(map(int, d.split("x")))
                                                                          for d in words[1:]], "runs": []})
        elif key == "run":
            x, y = (tuple(map(int, d.split("x"))) for d in words[:2])
            case["profiles"][-1]["runs"].append((x, y, words[2]))
        elif key == "invalid":
            case["invalid"].append(rest)
        elif key in ("plugin", "act", "xconst"):
            case[key] = rest
        elif key == "wref":
            case["wref"] = tuple(map(int, words))
    return case


def _attrs_of(case: dict):
    values = {}
    for name, (kind, vals) in case["attrs"].items():
        values[name] = {"INT": lambda v: int(v[0]), "INTS": lambda v: [int(x) for x in v],
                        "FLOAT": lambda v: float(v[0]), "STRING": lambda v: v[0] if v else ""}[kind](vals)
    cls = op_conv.ConvAttributes if case["plugin"] == op_conv.OP_TYPE else woq_op.WoqAttributes
    return cls.from_dict(values), values


def check_case(folder: Path, name: str) -> dict:
    case = read_case(folder / f"{name}.case")
    attrs, values = _attrs_of(case)
    attrs.validate()
    act = case["act"]
    # the attributes are the node builder's, with ONNX's types
    expected = attrs.to_dict()
    assert set(values) == set(expected)
    for a, v in expected.items():
        kind = case["attrs"][a][0]
        assert kind == {int: "INT", float: "FLOAT", str: "STRING", list: "INTS"}[type(v)], a
        assert values[a] == v, a
    # constant inputs in contract order, with the shapes the plugin checks
    positions = attrs.input_positions()
    assert len(case["inputs"]) == attrs.num_inputs - 1
    data = {}
    for pos, (kind, shape) in enumerate(case["inputs"], start=1):
        dtype = np.int32 if kind == "i32" else np.uint16
        data[pos] = np.fromfile(folder / f"{name}.in{pos}", dtype).reshape(shape)
    k, n = attrs.in_features, attrs.out_features
    fmt = attrs.weight_format
    assert data[positions["packed_weight"]].shape == tuple(fmt.layout.packed_shape(k, n, attrs.bits))
    scales = make_cases.from_bits(data[positions["scales"]], act).reshape(attrs.num_groups, n)
    zeros = None
    if "zeros" in positions:
        zeros = make_cases.from_bits(data[positions["zeros"]], act).reshape(attrs.num_groups, n)
        assert np.all(zeros == np.round(zeros)) and zeros.min() >= 0 and zeros.max() < 1 << attrs.bits
    assert ("bias" in positions) == bool(attrs.has_bias)
    if "weight_sums" in positions:
        u = fmt.unpack(data[positions["packed_weight"]], k, n)
        np.testing.assert_array_equal(data[positions["weight_sums"]], woq_op.weight_sums_of(u, attrs.bits,
                                                                                              attrs.group_size))
    assert case["wref"] == (k, n)
    wref = np.fromfile(folder / f"{name}.wref.f64", np.float64).reshape(k, n)
    np.testing.assert_array_equal(wref, fmt.dequantize(data[positions["packed_weight"]], scales, zeros, k, n,
                                                       attrs.group_size))
    assert np.abs(wref).max() > 0
    # runs inside their profile, output shapes of the op, the math each follows
    conv = case["plugin"] == op_conv.OP_TYPE
    assert case["xconst"] == ("1" if conv else "-1")
    for prof in case["profiles"]:
        lo, opt, hi = prof["range"]
        assert prof["runs"]
        for x, y, math in prof["runs"]:
            assert len(x) == len(lo) and all(a <= b <= c for a, b, c in zip(lo, x, hi, strict=True)), (x, lo, hi)
            assert all(a <= b <= c for a, b, c in zip(lo, opt, hi, strict=True))
            if conv:
                assert x[1] == attrs.in_channels and y == (x[0], n, *attrs.output_hw(x[2], x[3]))
            else:
                assert x[-1] == k and y == (*x[:-1], n)
            m = int(np.prod(x[:-1]))
            assert math == ("w8a8" if attrs.act_mode and m > make_cases.W8A8_GEMV_MAX_M else "float")
    return {"attrs": attrs, "act": act, "case": case}


@pytest.mark.parametrize("max_m", ["4096", "64"])
def test_linear_cases(tmp_path, max_m):
    assert make_cases.main([str(tmp_path), "-k", "256", "-n", "64", "--max-m", max_m]) == 0
    names = (tmp_path / "cases.txt").read_text().split()
    cases = [check_case(tmp_path, name) for name in names]
    seen = {(c["attrs"].bits, c["attrs"].group_size, c["attrs"].has_zeros, c["attrs"].act_mode,
             c["attrs"].act_asymmetric, c["act"]) for c in cases}
    for act in ("fp16", "bf16"):
        # weight-only INT8 pc, INT4 pc / g128 / g128 asymmetric, FP6 pc / g128
        assert {(8, -1, 0, 0, 0, act), (4, -1, 0, 0, 0, act), (4, 128, 0, 0, 0, act), (4, 128, 1, 0, 0, act),
                (6, -1, 0, 0, 0, act), (6, 128, 0, 0, 0, act)} <= seen
        # W8A8: symmetric and asymmetric activations, per-channel and grouped weights
        assert {(8, -1, 0, 1, 0, act), (8, -1, 0, 1, 1, act), (8, 128, 0, 1, 0, act), (8, 128, 0, 1, 1, act)} <= seen
    w8a8 = [c for c in cases if c["attrs"].act_mode]
    assert any(c["attrs"].has_bias for c in w8a8) and any(not c["attrs"].has_bias for c in w8a8)
    for c in w8a8:  # the GEMV's M range, the W8A8 GEMM's, and one profile across the boundary
        needs = [(p["need"], {r[2] for r in p["runs"]}) for p in c["case"]["profiles"]]
        assert needs == [(True, {"float"}), (True, {"w8a8"}), (False, {"float", "w8a8"})]
    assert sum(bool(c["case"]["invalid"]) for c in cases) == 1


def test_conv_cases(tmp_path):
    assert make_cases.main([str(tmp_path), "--op", "conv"]) == 0
    names = (tmp_path / "cases.txt").read_text().split()
    cases = [check_case(tmp_path, name) for name in names]
    formats = {(c["attrs"].bits, c["attrs"].group_size, c["attrs"].has_zeros) for c in cases}
    assert {(8, -1, 0), (8, 128, 0), (4, -1, 0), (4, 128, 0)} <= formats
    for bits in (8, 4):  # every fused activation meets INT8 and INT4, in both activation types
        for act in ("fp16", "bf16"):
            eps = {c["attrs"].activation for c in cases if c["attrs"].bits == bits and c["act"] == act}
            assert eps == {e.c_enum for e in EPILOGUES}, (bits, act, eps)
    geos = [c["attrs"] for c in cases]
    assert {a.kernel_shape for a in geos} == {(1, 1), (3, 3), (7, 7)}
    assert any(a.strides == (2, 2) for a in geos) and any(a.dilations == (2, 2) for a in geos)
    assert any(len(set(a.pads)) > 1 for a in geos)  # asymmetric padding
    runs = [r for c in cases for p in c["case"]["profiles"] for r in p["runs"]]
    assert any(x[2] % 2 and x[3] % 2 for x, _, _ in runs) and any(x[0] > 1 for x, _, _ in runs)
    assert any(c["attrs"].has_bias for c in cases) and any(not c["attrs"].has_bias for c in cases)
    assert sum(bool(c["case"]["invalid"]) for c in cases) == 1
    # the combinations the registry walk counts as covered are the ones written
    covered = make_cases.synthetic_combinations()
    names = {8: "int8", 4: "int4"}
    assert {(names[c["attrs"].bits], "weight_only", "conv2d", c["attrs"].epilogue.name) for c in cases} <= covered


def test_model_cases_read_w8a8_nodes(tmp_path):
    pytest.importorskip("onnx_graphsurgeon")
    model = tmp_path / "llama.onnx"
    build = subprocess.run([sys.executable, str(ROOT / "samples" / "llama" / "build_model.py"), "--hidden", "128",
                            "--intermediate", "256", "--layers", "1", "--heads", "2", "-o", str(model)],
                           capture_output=True, text=True, cwd=ROOT)
    assert build.returncode == 0, build.stderr[-2000:]
    quantized = tmp_path / "llama.w8a8.onnx"
    done = subprocess.run([sys.executable, "-m", "graph_passes", "quantize", str(model), "-o", str(quantized), "-q",
                           "--bits", "8", "--act-mode", "w8a8", "--act-asymmetric"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    (tmp_path / "cases").mkdir()
    names = make_cases.model_cases(tmp_path / "cases", quantized, "m0_")
    assert names
    cases = [check_case(tmp_path / "cases", name) for name in names]
    assert all(c["attrs"].act_mode == 1 and c["attrs"].act_asymmetric == 1 for c in cases)


def test_harness_reads_what_make_cases_writes(tmp_path):
    """plugin_conformance --list (no GPU needed) against the case files: attributes, inputs, profiles, runs."""
    sys.path.insert(0, str(HERE.parent))
    from cxx_build import HEADERS, cuda_include

    cuda, cxx = cuda_include(), shutil.which("g++") or shutil.which("c++")
    cudart = None if cuda is None else next(iter(sorted(cuda.parent.glob("lib*/libcudart_static.a"))), None)
    if not HEADERS or cuda is None or cxx is None or cudart is None:
        pytest.skip("needs TensorRT headers (TENSORRT_INCLUDE_DIR), the CUDA runtime and a C++ compiler")
    exe = tmp_path / "plugin_conformance"
    cmd = [cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-isystem", str(HEADERS[0]),
           "-isystem", str(cuda), str(HERE / "plugin_conformance.cpp"), "-o", str(exe), str(cudart), "-ldl", "-lrt",
           "-pthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for op in ("linear", "conv"):
        folder = tmp_path / op
        assert make_cases.main([str(folder), "--op", op, "-k", "256", "-n", "64", "--max-m", "64"]) == 0
        listing = subprocess.run([str(exe), "--list", str(folder)], capture_output=True, text=True)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        lines = listing.stdout.splitlines()
        names = (folder / "cases.txt").read_text().split()
        assert [ln.split()[0] for ln in lines] == names
        for name, line in zip(names, lines, strict=True):
            case = read_case(folder / f"{name}.case")
            attrs, _ = _attrs_of(case)
            inputs = "".join(f"{kind}:{'x'.join(map(str, shape))}," for kind, shape in case["inputs"])
            profiles = ""
            for p in case["profiles"]:
                lo, opt, hi = ("x".join(map(str, d)) for d in p["range"])
                profiles += f" profile={'need' if p['need'] else 'any'}:{lo}:{opt}:{hi}"
                profiles += "".join(f" run={'x'.join(map(str, x))}:{'x'.join(map(str, y))}:{m}"
                                    for x, y, m in p["runs"])
            expect = (f"{name} {case['plugin']} {case['act']} attrs={len(case['attrs'])} K={attrs.in_features} "
                      f"N={attrs.out_features} xconst={case['xconst']} inputs={inputs}{profiles} "
                      f"invalid={len(case['invalid'])}")
            assert line == expect
