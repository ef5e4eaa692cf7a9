"""Compiling the plugins' C++ on the CPU, for the tests under tests/plugins.

* The TensorRT header sets found: $TENSORRT_INCLUDE_DIR, and third_party/tensorrt-*-include of a checkout (HEADERS;
  `each_header_set` parametrizes a test's `trt_include` over them), the CUDA runtime header that TensorRT's headers
  include, and a C++ compiler. Where one is missing the test is skipped, with the reason (CI has no TensorRT headers).
* A syntax check of one source (g++ -fsyntax-only, -Wall -Wextra -Werror on our files).
* The host-check programs (tests/plugins/weight_only_linear/plugin_host_checks.cpp,
  tests/plugins/weight_only_conv/conv_plugin_host_checks.cpp): their main linked with the plugin library's sources
  and host_harness.h's stand-ins, run on the nodes graph_passes writes.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS_INCLUDE = ROOT / "plugins" / "kernels" / "include"
PLUGIN_SOURCES = [ROOT / "plugins" / "weight_only_linear" / name
                  for name in ("weightOnlyLinearPlugin.cpp", "pluginLogger.cpp", "pluginLibrary.cpp")]
PLUGIN_SOURCES.append(ROOT / "plugins" / "weight_only_conv" / "weightOnlyConvPlugin.cpp")


def header_sets() -> list[Path]:
    found = []
    if os.environ.get("TENSORRT_INCLUDE_DIR"):
        found.append(Path(os.environ["TENSORRT_INCLUDE_DIR"]))
    found += [Path(p) for p in sorted(glob.glob(str(ROOT / "third_party" / "tensorrt-*-include")))]
    return [p for p in found if (p / "NvInferRuntime.h").is_file()]


def cuda_include() -> Path | None:
    cands = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    cands += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for c in cands:
        if c and (Path(c) / "include" / "cuda_runtime_api.h").is_file():
            return Path(c) / "include"
    return None


HEADERS = header_sets()

each_header_set = pytest.mark.parametrize("trt_include", HEADERS or [None], ids=lambda p: p.name if p else "none")


def compile_command(trt_include: Path | None) -> list[str]:
    """The compiler and the flags every check compiles with against `trt_include` (its sources and output to add);
    pytest.skip, with the reason, where the headers, the CUDA runtime header or a compiler are missing."""
    if trt_include is None:
        pytest.skip("no TensorRT headers (set TENSORRT_INCLUDE_DIR to a folder holding NvInferRuntime.h)")
    cuda = cuda_include()
    if cuda is None:
        pytest.skip("no CUDA runtime header (cuda_runtime_api.h); TensorRT's headers include it")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    return [cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-isystem", str(trt_include), "-isystem", str(cuda),
            "-I", str(KERNELS_INCLUDE)]


def check_syntax(source: Path, trt_include: Path | None) -> None:
    done = subprocess.run([*compile_command(trt_include), "-fsyntax-only", str(source)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-4000:]


def build_host_checks(main: Path, trt_include: Path | None, out: Path) -> Path:
    """Compile `main` with the plugin library's sources into `out`."""
    cmd = [*compile_command(trt_include), "-O1", str(main), *map(str, PLUGIN_SOURCES), "-o", str(out), "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def woq_node(label: str, attrs):
    """(label, the ONNX node graph_passes writes for `attrs`, named `label`)."""
    from graph_passes.op import make_onnx_node

    inputs = [f"in{i}" for i in range(attrs.num_inputs)]
    return label, make_onnx_node(inputs, ["Y"], attrs, name=label)


def write_nodes(path: Path, nodes) -> Path:
    """Nodes as the C++ side reads them: "node OP LABEL", "attr TYPE NAME VALUES..." per attribute (ONNX types)."""
    onnx = pytest.importorskip("onnx")
    lines = []
    for label, node in nodes:
        lines.append(f"node {node.op_type} {label}")
        for a in node.attribute:
            kind = onnx.AttributeProto.AttributeType.Name(a.type)
            value = onnx.helper.get_attribute_value(a)
            if kind == "STRING":
                values = [value.decode()] if value else []
            elif kind == "FLOAT":
                values = [repr(float(value))]
            elif kind == "INT":
                values = [str(value)]
            elif kind == "INTS":
                values = [str(v) for v in value]
            else:
                raise AssertionError(f"{label}: attribute {a.name} of type {kind}")
            lines.append(" ".join(["attr", kind, a.name, *values]))
    path.write_text("\n".join(lines) + "\n")
    return path


def run_host_checks(main: Path, nodes: Callable[[], Iterable], trt_include: Path | None, tmp_path: Path) -> None:
    """Build the host-check program `main`, run it on the (label, node) pairs `nodes()` yields: every check passes,
    and there is at least one."""
    exe = build_host_checks(main, trt_include, tmp_path / main.stem)
    path = write_nodes(tmp_path / "nodes.txt", list(nodes()))
    done = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=600)
    print(done.stdout[-8000:])
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert re.search(r"^[1-9]\d* passed, 0 failed$", done.stdout, re.M)
