"""CPU checks of the WeightOnlyConv plugin: it compiles against the TensorRT headers found (as the WeightOnlyLinear
checks), and its creator lists exactly the attributes graph_passes writes on a WeightOnlyConv node, with the types
TensorRT's ONNX parser gives them (INT -> kINT32 of length 1, INTS -> kINT32 arrays, FLOAT -> kFLOAT32)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parents[2] / "plugins" / "weight_only_conv" / "weightOnlyConvPlugin.cpp"
sys.path.insert(0, str(HERE.parent))

from cxx_build import check_syntax, each_header_set  # noqa: E402


@each_header_set
def test_compiles_against_tensorrt_headers(trt_include):
    check_syntax(SOURCE, trt_include)


def test_fields_match_the_op_contract():
    from graph_passes.op_conv import K_ORDER_IJC, ConvAttributes
    from graph_passes.registry.epilogues import CLIP

    fields = re.findall(r'\{"(\w+)", PluginFieldType::k(INT32|FLOAT32), (\d), (true|false)\}', SOURCE.read_text())
    attrs = ConvAttributes(bits=4, group_size=64, in_features=576, out_features=32, in_channels=64,
                           kernel_shape=(3, 3), activation=CLIP.c_enum, clip_min=0.0, clip_max=6.0,
                           k_order=K_ORDER_IJC).to_dict()
    expected = {k: v for k, v in attrs.items() if not k.startswith("plugin_")}
    assert {f[0] for f in fields} == set(expected)
    for name, ctype, length, _ in fields:
        value = expected[name]
        if isinstance(value, float):
            assert ctype == "FLOAT32" and length == "1", name
        else:
            assert ctype == "INT32" and int(length) == (len(value) if isinstance(value, list) else 1), name
