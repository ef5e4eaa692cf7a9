"""CPU checks of the WeightOnlyLinear plugin's sources and of the harness's inputs.

* The plugin and the conformance harness compile (g++ -fsyntax-only, -Wall -Wextra -Werror on our files) against
  every TensorRT header set found: $TENSORRT_INCLUDE_DIR, and third_party/tensorrt-*-include of a checkout. Skipped,
  with the reason, where no headers (or no CUDA runtime header, which TensorRT's headers include) are found.
* The harness's inputs and references are checked in tests/plugins/conformance/test_conformance_cases.py.
* The TensorRT-RTX check's minimal model is a valid ONNX file with a well-formed WeightOnlyLinear node.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PLUGIN = HERE.parents[2] / "plugins" / "weight_only_linear"
sys.path.insert(0, str(HERE.parent))

from cxx_build import check_syntax, each_header_set  # noqa: E402


@each_header_set
@pytest.mark.parametrize("source", ["weightOnlyLinearPlugin.cpp", "pluginLogger.cpp", "pluginLibrary.cpp",
                                    "../../tests/plugins/conformance/plugin_conformance.cpp"])
def test_compiles_against_tensorrt_headers(trt_include, source):
    check_syntax(PLUGIN / source, trt_include)


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


@pytest.mark.parametrize("kind", ["w8a8", "conv"])
def test_rtx_node_models_are_valid(tmp_path, kind):
    """The W8A8 and WeightOnlyConv models of the TensorRT-RTX check pass onnx.checker and run through graph_passes'
    reference evaluator (the op contract) to the declared output shape."""
    onnx = pytest.importorskip("onnx")
    import numpy as np

    sys.path.insert(0, str(HERE / "rtx"))
    import rtx_build_check
    from graph_passes.op import reference_evaluator

    model = onnx.load(str(rtx_build_check.write_node_model(tmp_path / "m.onnx", kind)))
    onnx.checker.check_model(model)
    node = model.graph.node[0]
    assert (node.op_type, node.domain) == ({"w8a8": "WeightOnlyLinear", "conv": "WeightOnlyConv"}[kind], "trt_woq")
    x_info, y_info = model.graph.input[0], model.graph.output[0]
    shape = [3 if d.dim_param else d.dim_value for d in x_info.type.tensor_type.shape.dim]
    x = np.random.default_rng().standard_normal(shape).astype(np.float16)
    (y,) = reference_evaluator(model).run(None, {"X": x})
    assert list(y.shape) == [3 if d.dim_param else d.dim_value for d in y_info.type.tensor_type.shape.dim]
    assert np.isfinite(y.astype(np.float32)).all() and np.abs(y.astype(np.float32)).max() > 0
