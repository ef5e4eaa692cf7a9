"""The WeightOnlyLinear plugin's host code on the CPU, against every TensorRT header set found (as
test_plugin_sources.py): plugin_host_checks.cpp, linked with the plugin's sources and host_harness.h's stand-ins for
the kernels library and the CUDA runtime (no GPU, no TensorRT library), drives the creator with the nodes that
graph_passes writes (fields built as TensorRT's ONNX parser builds them), the serialization round trip, shapes,
formats, tactics, workspace and enqueue's operands, and invalid fields. Skipped, with the reason, where no headers,
no CUDA runtime header or no C++ compiler are found (CI has no TensorRT headers).

Also, without headers: the creator's field table in the source lists exactly the attributes graph_passes writes on a
WeightOnlyLinear node, with the types TensorRT's ONNX parser gives them."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
PLUGIN = ROOT / "plugins" / "weight_only_linear"
sys.path.insert(0, str(HERE))

from test_plugin_sources import HEADERS, _cuda_include  # noqa: E402

PLUGIN_SOURCES = [PLUGIN / "weightOnlyLinearPlugin.cpp", PLUGIN / "pluginLogger.cpp", PLUGIN / "pluginLibrary.cpp",
                  ROOT / "plugins" / "weight_only_conv" / "weightOnlyConvPlugin.cpp"]


def build_host_checks(main: Path, trt_include: Path | None, out: Path) -> Path:
    """Compile `main` with the plugin library's sources into `out`; pytest.skip when something is missing."""
    if trt_include is None:
        pytest.skip("no TensorRT headers (set TENSORRT_INCLUDE_DIR to a folder holding NvInferRuntime.h)")
    cuda = _cuda_include()
    cxx = shutil.which("g++") or shutil.which("c++")
    if cuda is None or cxx is None:
        pytest.skip("no CUDA runtime header (cuda_runtime_api.h) or no C++ compiler")
    cmd = [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-isystem", str(trt_include), "-isystem",
           str(cuda), "-I", str(ROOT / "plugins" / "kernels" / "include"), "-I", str(HERE), str(main),
           *map(str, PLUGIN_SOURCES), "-o", str(out), "-lpthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


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


def linear_nodes():
    """WeightOnlyLinear nodes over every option graph_passes writes: formats, groups, zeros, bias, epilogues (clip
    with finite and infinite bounds), W8A8 symmetric and asymmetric."""
    from graph_passes.op import WoqAttributes, make_onnx_node
    from graph_passes.registry.epilogues import CLIP, EPILOGUES

    def node(label, attrs):
        inputs = [f"in{i}" for i in range(attrs.num_inputs)]
        return label, make_onnx_node(inputs, ["Y"], attrs, name=label)

    base = dict(in_features=256, out_features=64)
    yield node("int4_g128", WoqAttributes(bits=4, group_size=128, **base))
    yield node("int4_g64_zeros_bias", WoqAttributes(bits=4, group_size=64, has_zeros=1, has_bias=1, **base))
    yield node("int8_pc_bias", WoqAttributes(bits=8, group_size=-1, has_bias=1, **base))
    yield node("int8_g32_zeros", WoqAttributes(bits=8, group_size=32, has_zeros=1, **base))
    yield node("fp6_pc", WoqAttributes(bits=6, group_size=-1, layout=2, **base))
    yield node("fp6_g256_bias", WoqAttributes(bits=6, group_size=256, layout=2, has_bias=1, **base))
    for e in EPILOGUES:
        params = {"clip_min": 0.0, "clip_max": 6.0} if e is CLIP else {}
        yield node(f"int4_{e.name}", WoqAttributes(bits=4, group_size=128, **base).with_epilogue(e, **params))
    yield node("int4_clip_max_only", WoqAttributes(bits=4, group_size=128, **base).with_epilogue(CLIP, clip_max=6.0))
    yield node("int4_clip_min_only", WoqAttributes(bits=4, group_size=128, **base).with_epilogue(CLIP, clip_min=-1.5))
    yield node("w8a8_pc", WoqAttributes(bits=8, group_size=-1, act_mode=1, **base))
    yield node("w8a8_g128_bias", WoqAttributes(bits=8, group_size=128, act_mode=1, has_bias=1, **base))
    yield node("w8a8_asym_g64_bias", WoqAttributes(bits=8, group_size=64, act_mode=1, act_asymmetric=1, has_bias=1,
                                                   **base))
    yield node("w8a8_asym_pc", WoqAttributes(bits=8, group_size=-1, act_mode=1, act_asymmetric=1, **base))


@pytest.mark.parametrize("trt_include", HEADERS or [None], ids=lambda p: p.name if p else "none")
def test_host_checks(trt_include, tmp_path):
    exe = build_host_checks(HERE / "plugin_host_checks.cpp", trt_include, tmp_path / "plugin_host_checks")
    nodes = write_nodes(tmp_path / "nodes.txt", list(linear_nodes()))
    done = subprocess.run([str(exe), str(nodes)], capture_output=True, text=True, timeout=600)
    print(done.stdout[-8000:])
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    assert re.search(r"^[1-9]\d* passed, 0 failed$", done.stdout, re.M)


def test_fields_match_the_op_contract():
    """kINT_FIELDS / kFLOAT_FIELDS of weightOnlyLinearPlugin.cpp are the attributes graph_passes writes (all of
    them, for a node using every option), required exactly where graph_passes requires them."""
    from graph_passes.op import FLOAT_ATTRIBUTES, INT_ATTRIBUTES, OPTIONAL_INT_ATTRIBUTES, WoqAttributes
    from graph_passes.registry.epilogues import CLIP

    source = (PLUGIN / "weightOnlyLinearPlugin.cpp").read_text()
    def table(name):
        return re.search(name + r"\[\] = \{(.*?)\n\};", source, re.S).group(1)

    ints = re.findall(r'\{"(\w+)", &WeightOnlyLinearParams::\w+(, false)?\}', table("kINT_FIELDS"))
    floats = re.findall(r'\{"(\w+)", &WeightOnlyLinearParams::\w+()\}', table("kFLOAT_FIELDS"))
    attrs = WoqAttributes(bits=8, group_size=64, in_features=256, out_features=64, has_bias=1, act_mode=1,
                          act_asymmetric=1).with_epilogue(CLIP, clip_min=0.0, clip_max=6.0).to_dict()
    written = {k: v for k, v in attrs.items() if not k.startswith("plugin_")}
    assert {n for n, _ in ints} | {n for n, _ in floats} == set(written)
    assert all(isinstance(written[n], int) for n, _ in ints)
    assert all(isinstance(written[n], float) and not math.isnan(written[n]) for n, _ in floats)
    assert {n for n, optional in ints if not optional} == set(INT_ATTRIBUTES)
    assert {n for n, optional in ints if optional} == {"activation", *OPTIONAL_INT_ATTRIBUTES}
    assert {n for n, _ in floats} == set(FLOAT_ATTRIBUTES)
