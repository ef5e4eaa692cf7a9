"""CPU checks of the WeightOnlyLinear plugin's sources and of the harness's inputs.

* The plugin and the conformance harness compile (g++ -fsyntax-only, -Wall -Wextra -Werror on our files) against
  every TensorRT header set found: $TENSORRT_INCLUDE_DIR, and third_party/tensorrt-*-include of a checkout. Skipped,
  with the reason, where no headers (or no CUDA runtime header, which TensorRT's headers include) are found.
* make_cases.py writes what the harness reads, and its float64 reference weight is the layout's dequantization.
* The TensorRT-RTX check's minimal model is a valid ONNX file with a well-formed WeightOnlyLinear node.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PLUGIN = ROOT / "plugins" / "weight_only_linear"


def _header_sets() -> list[Path]:
    found = []
    if os.environ.get("TENSORRT_INCLUDE_DIR"):
        found.append(Path(os.environ["TENSORRT_INCLUDE_DIR"]))
    found += [Path(p) for p in sorted(glob.glob(str(ROOT / "third_party" / "tensorrt-*-include")))]
    return [p for p in found if (p / "NvInferRuntime.h").is_file()]


def _cuda_include() -> Path | None:
    cands = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    cands += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for c in cands:
        if c and (Path(c) / "include" / "cuda_runtime_api.h").is_file():
            return Path(c) / "include"
    return None


HEADERS = _header_sets()


@pytest.mark.parametrize("trt_include", HEADERS or [None], ids=lambda p: p.name if p else "none")
@pytest.mark.parametrize("source", ["weightOnlyLinearPlugin.cpp", "pluginLogger.cpp", "pluginLibrary.cpp",
                                    "../../tests/plugins/weight_only_linear/weight_only_linear_conformance.cpp"])
def test_compiles_against_tensorrt_headers(trt_include, source):
    if trt_include is None:
        pytest.skip("no TensorRT headers (set TENSORRT_INCLUDE_DIR to a folder holding NvInferRuntime.h)")
    cuda = _cuda_include()
    if cuda is None:
        pytest.skip("no CUDA runtime header (cuda_runtime_api.h); TensorRT's headers include it")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    cmd = [cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-isystem", str(trt_include),
           "-isystem", str(cuda), "-I", str(ROOT / "plugins" / "kernels" / "include"), str(PLUGIN / source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_make_cases_writes_what_the_harness_reads(tmp_path):
    sys.path.insert(0, str(ROOT))
    from graph_passes.registry.formats import format_by_bits

    k, n = 256, 64
    proc = subprocess.run([sys.executable, str(HERE / "make_cases.py"), str(tmp_path), "-k", str(k), "-n", str(n)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = (tmp_path / "cases.txt").read_text().split("\n")
    cases = [ln.split() for ln in lines if ln]
    assert len(cases) == 12
    seen = set()
    for name, bits, g, kk, nn, layout, hz, hb, act in cases:
        bits, g, hz, hb = int(bits), int(g), int(hz), int(hb)
        fmt = format_by_bits(int(bits))
        assert (int(kk), int(nn), int(layout)) == (k, n, fmt.layout.VERSION) and act in ("fp16", "bf16")
        seen.add((bits, g, hz, act))
        groups = 1 if g == -1 else k // g
        packed = np.fromfile(tmp_path / f"{name}.weight.i32", np.int32).reshape(fmt.layout.packed_shape(k, n, bits))
        sbits = np.fromfile(tmp_path / f"{name}.scales.u16", np.uint16)
        assert sbits.size == groups * n
        scales = (sbits.view(np.float16).astype(np.float64) if act == "fp16"
                  else (sbits.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
        zeros = None
        if hz:
            zb = np.fromfile(tmp_path / f"{name}.zeros.u16", np.uint16)
            zeros = (zb.view(np.float16).astype(np.float64) if act == "fp16"
                     else (zb.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
            assert np.all(zeros == np.round(zeros)) and zeros.min() >= 0 and zeros.max() < 1 << bits
        assert (tmp_path / f"{name}.bias.u16").is_file() == bool(hb)
        wref = np.fromfile(tmp_path / f"{name}.wref.f64", np.float64).reshape(k, n)
        expect = fmt.dequantize(packed, scales.reshape(groups, n), None if zeros is None else zeros.reshape(groups, n),
                                k, n, g)
        np.testing.assert_array_equal(wref, expect)
        assert np.abs(wref).max() > 0
    # the synthetic matrix: INT8 per-channel, INT4 per-channel, g128, g128 asymmetric, FP6 per-channel, g128, x fp16 / bf16
    for act in ("fp16", "bf16"):
        assert {(8, -1, 0, act), (4, -1, 0, act), (4, 128, 0, act), (4, 128, 1, act), (6, -1, 0, act),
                (6, 128, 0, act)} <= seen


def test_rtx_minimal_model_is_valid(tmp_path):
    onnx = pytest.importorskip("onnx")
    sys.path.insert(0, str(HERE / "rtx"))
    import rtx_build_check

    path = rtx_build_check.write_minimal_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    node = model.graph.node[0]
    assert (node.op_type, node.domain) == ("WeightOnlyLinear", "trt_woq")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["plugin_version"] == b"1" and attrs["plugin_namespace"] == b""
    assert {"trt_woq": 1}.items() <= {o.domain: o.version for o in model.opset_import}.items()
