"""The WeightOnlyLinear plugin's host code on the CPU, against every TensorRT header set found (tests/plugins/
cxx_build.py): plugin_host_checks.cpp, linked with the plugin's sources and tests/plugins/host_harness.h's stand-ins
for the kernels library and the CUDA runtime (no GPU, no TensorRT library), drives the creator with the nodes that
graph_passes writes (fields built as TensorRT's ONNX parser builds them), the serialization round trip, shapes,
formats, tactics, workspace and enqueue's operands, and invalid fields. Skipped, with the reason, where no headers,
no CUDA runtime header or no C++ compiler are found (CI has no TensorRT headers).

Also, without headers: the creator's field table in the source lists exactly the attributes graph_passes writes on a
WeightOnlyLinear node, with the types TensorRT's ONNX parser gives them."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLUGIN = HERE.parents[2] / "plugins" / "weight_only_linear"
sys.path.insert(0, str(HERE.parent))

from cxx_build import each_header_set, run_host_checks, woq_node  # noqa: E402


def linear_nodes():
    """WeightOnlyLinear nodes over every option graph_passes writes: formats, groups, zeros, bias, epilogues (clip
    with finite and infinite bounds), W8A8 symmetric and asymmetric."""
    from graph_passes.op import WoqAttributes
    from graph_passes.registry.epilogues import CLIP, EPILOGUES

    base = dict(in_features=256, out_features=64)
    yield woq_node("int4_g128", WoqAttributes(bits=4, group_size=128, **base))
    yield woq_node("int4_g64_zeros_bias", WoqAttributes(bits=4, group_size=64, has_zeros=1, has_bias=1, **base))
    yield woq_node("int8_pc_bias", WoqAttributes(bits=8, group_size=-1, has_bias=1, **base))
    yield woq_node("int8_g32_zeros", WoqAttributes(bits=8, group_size=32, has_zeros=1, **base))
    yield woq_node("fp6_pc", WoqAttributes(bits=6, group_size=-1, layout=2, **base))
    yield woq_node("fp6_g256_bias", WoqAttributes(bits=6, group_size=256, layout=2, has_bias=1, **base))
    for e in EPILOGUES:
        params = {"clip_min": 0.0, "clip_max": 6.0} if e is CLIP else {}
        yield woq_node(f"int4_{e.name}", WoqAttributes(bits=4, group_size=128, **base).with_epilogue(e, **params))
    int4 = WoqAttributes(bits=4, group_size=128, **base)
    yield woq_node("int4_clip_max_only", int4.with_epilogue(CLIP, clip_max=6.0))
    yield woq_node("int4_clip_min_only", int4.with_epilogue(CLIP, clip_min=-1.5))
    yield woq_node("w8a8_pc", WoqAttributes(bits=8, group_size=-1, act_mode=1, **base))
    yield woq_node("w8a8_g128_bias", WoqAttributes(bits=8, group_size=128, act_mode=1, has_bias=1, **base))
    yield woq_node("w8a8_asym_g64_bias", WoqAttributes(bits=8, group_size=64, act_mode=1, act_asymmetric=1,
                                                       has_bias=1, **base))
    yield woq_node("w8a8_asym_pc", WoqAttributes(bits=8, group_size=-1, act_mode=1, act_asymmetric=1, **base))


@each_header_set
def test_host_checks(trt_include, tmp_path):
    run_host_checks(HERE / "plugin_host_checks.cpp", linear_nodes, trt_include, tmp_path)


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
