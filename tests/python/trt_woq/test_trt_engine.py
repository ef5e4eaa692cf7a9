"""build_engine (trt_woq.engine): refusals without TensorRT, and the calls it makes, against a fake TensorRT."""

from __future__ import annotations

import pytest

from trt_woq import engine
from trt_woq.errors import EngineBuildError, PluginLibraryNotFoundError, TensorRTNotFoundError, TrtWoqError


def test_refuses_cleanly_without_tensorrt(no_tensorrt, tiny_model, fake_plugin):
    with pytest.raises(TensorRTNotFoundError, match="pip install tensorrt"):
        engine.build_engine(tiny_model)


def test_refuses_a_missing_model(tmp_path):
    with pytest.raises(TrtWoqError, match="no such file"):
        engine.build_engine(tmp_path / "missing.onnx")


def test_refuses_an_unknown_precision(tiny_model):
    with pytest.raises(TrtWoqError, match="precision 'int3'"):
        engine.build_engine(tiny_model, precision="int3")


def test_refuses_without_the_plugin_library(fake_tensorrt, tiny_model, monkeypatch, tmp_path):
    fake_tensorrt()
    monkeypatch.setenv("TRT_WOQ_PLUGIN_PATH", str(tmp_path / "gone.so"))
    with pytest.raises(PluginLibraryNotFoundError):
        engine.build_engine(tiny_model)


def test_strongly_typed_build_with_default_profile(fake_tensorrt, tiny_model, tmp_path):
    trt = fake_tensorrt()
    logs = []
    out = tmp_path / "m.engine"
    blob = engine.build_engine(tiny_model, out, log=logs.append)
    assert blob == b"ENGINE" and out.read_bytes() == b"ENGINE"
    assert ("create_network", 1 << 5) in trt.calls  # STRONGLY_TYPED
    assert not [c for c in trt.calls if c[0] == "set_flag"]
    lo, opt, hi = engine.DEFAULT_BATCH_RANGE
    assert ("set_shape", "X", (lo, 64), (opt, 64), (hi, 64)) in trt.calls
    assert logs and "default profile" in logs[0]


def test_explicit_profiles_and_weak_typing(fake_tensorrt, tiny_model):
    trt = fake_tensorrt()
    engine.build_engine(tiny_model, profiles=[{"X": ((1, 64), (4, 64), (16, 64))}, {"X": (2, 64)}],
                        precision="bf16", workspace_bytes=1 << 20)
    assert ("set_shape", "X", (1, 64), (4, 64), (16, 64)) in trt.calls
    assert ("set_shape", "X", (2, 64), (2, 64), (2, 64)) in trt.calls
    assert ("set_flag", 1) in trt.calls and ("workspace", 1 << 20) in trt.calls
    assert ("create_network", 0) in trt.calls


def test_profile_for_an_unknown_input(fake_tensorrt, tiny_model):
    fake_tensorrt()
    with pytest.raises(TrtWoqError, match="profile names input 'Y'"):
        engine.build_engine(tiny_model, profiles=[{"Y": (1, 64)}])


def test_bad_profile_order(fake_tensorrt, tiny_model):
    fake_tensorrt()
    with pytest.raises(TrtWoqError, match="min <= opt <= max"):
        engine.build_engine(tiny_model, profiles=[{"X": ((4, 64), (1, 64), (8, 64))}])


def test_parse_failure_carries_tensorrt_errors(fake_tensorrt, tiny_model):
    fake_tensorrt(parse_ok=False)
    with pytest.raises(EngineBuildError, match="plugin not found"):
        engine.build_engine(tiny_model)


def test_build_failure(fake_tensorrt, tiny_model):
    fake_tensorrt(build_ok=False)
    with pytest.raises(EngineBuildError, match="could not build"):
        engine.build_engine(tiny_model)
