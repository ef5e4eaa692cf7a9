"""Fixtures of the trt_woq runtime tests: trt_woq importable from a checkout; a fake TensorRT module that records
what the runtime asks of it (TensorRT itself is not installable on the CI machines)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
try:
    import trt_woq  # noqa: F401  (installed)
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # graph_passes from the checkout


@pytest.fixture
def no_tensorrt(monkeypatch):
    """Make `import tensorrt` (and tensorrt_rtx) fail, as on a machine without TensorRT."""
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)
    monkeypatch.delenv("TRT_WOQ_TENSORRT_MODULE", raising=False)
    monkeypatch.delenv("POLYGRAPHY_USE_TENSORRT_RTX", raising=False)


@pytest.fixture
def fake_plugin(tmp_path, monkeypatch):
    """A file standing in for libtrt_woq_plugin.so, named by TRT_WOQ_PLUGIN_PATH."""
    lib = tmp_path / "libtrt_woq_plugin.so"
    lib.write_bytes(b"\x7fELF not really")
    monkeypatch.setenv("TRT_WOQ_PLUGIN_PATH", str(lib))
    return lib


class _Enum:
    def __init__(self, **members):
        for k, v in members.items():
            setattr(self, k, v)


def make_fake_tensorrt(parse_ok=True, build_ok=True, creator=True, input_shape=(-1, 64)):
    """A module with the parts of TensorRT's Python API that trt_woq.engine and trt_woq.plugin use."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = "10.99-fake"
    calls = trt.calls = []

    class Registry:
        def load_library(self, path):
            calls.append(("load_library", path))
            return object()

        def get_creator(self, name, version, namespace):
            calls.append(("get_creator", name, version, namespace))
            return object() if creator else None

    registry = Registry()
    trt.get_plugin_registry = lambda: registry

    class Logger:
        VERBOSE, INFO, WARNING = 4, 3, 2

        def __init__(self, severity):
            self.severity = severity

    trt.Logger = Logger
    trt.NetworkDefinitionCreationFlag = _Enum(STRONGLY_TYPED=5)
    trt.BuilderFlag = _Enum(FP16=0, BF16=1)
    trt.MemoryPoolType = _Enum(WORKSPACE=0)

    class Tensor:
        def __init__(self, name, shape):
            self.name, self.shape = name, shape

    class Network:
        num_inputs = 1

        def get_input(self, i):
            return Tensor("X", input_shape)

    class Parser:
        num_errors = 0 if parse_ok else 1

        def __init__(self, network, logger):
            pass

        def parse_from_file(self, path):
            calls.append(("parse_from_file", path))
            return parse_ok

        def get_error(self, i):
            return "In node 0 (WeightOnlyLinear): plugin not found"

    trt.OnnxParser = Parser

    class Profile:
        def set_shape(self, name, lo, opt, hi):
            calls.append(("set_shape", name, tuple(lo), tuple(opt), tuple(hi)))

    class Config:
        builder_optimization_level = 3

        def set_flag(self, f):
            calls.append(("set_flag", f))

        def set_memory_pool_limit(self, pool, n):
            calls.append(("workspace", n))

        def add_optimization_profile(self, p):
            calls.append(("add_profile",))

    class Builder:
        def __init__(self, logger):
            pass

        def create_network(self, flags):
            calls.append(("create_network", flags))
            return Network()

        def create_builder_config(self):
            return Config()

        def create_optimization_profile(self):
            return Profile()

        def build_serialized_network(self, network, config):
            calls.append(("build",))
            return b"ENGINE" if build_ok else None

    trt.Builder = Builder
    return trt


@pytest.fixture
def fake_tensorrt(monkeypatch, fake_plugin):
    """Installs make_fake_tensorrt() as `tensorrt` and forgets registrations of earlier tests."""
    from trt_woq import plugin

    def install(**kw):
        trt = make_fake_tensorrt(**kw)
        monkeypatch.setitem(sys.modules, "tensorrt", trt)
        monkeypatch.delenv("TRT_WOQ_TENSORRT_MODULE", raising=False)
        monkeypatch.delenv("POLYGRAPHY_USE_TENSORRT_RTX", raising=False)
        monkeypatch.setattr(plugin, "_registered", {})
        return trt

    return install


@pytest.fixture
def tiny_model(tmp_path):
    """A one-node plugin-format ONNX file (the engine tests never parse it for real)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("Identity", ["X"], ["Y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT16, ["b", 64])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, ["b", 64])])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path
