"""Plugin discovery and registration (trt_woq.plugin), without TensorRT."""

from __future__ import annotations

import pytest

from trt_woq import _libs, plugin
from trt_woq.errors import (PluginLibraryNotFoundError, PluginLoadError, TensorRTNotFoundError, TrtWoqError)


def test_errors_share_the_base_the_cli_catches():
    for cls in (PluginLibraryNotFoundError, PluginLoadError, TensorRTNotFoundError):
        assert issubclass(cls, TrtWoqError) and issubclass(cls, RuntimeError)


def test_env_var_names_the_library(fake_plugin):
    assert plugin.plugin_library_path() == fake_plugin


def test_env_var_to_a_missing_file_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("TRT_WOQ_PLUGIN_PATH", str(tmp_path / "nope.so"))
    with pytest.raises(PluginLibraryNotFoundError, match="TRT_WOQ_PLUGIN_PATH=.*nope.so: no such file"):
        plugin.plugin_library_path()


def test_installed_copy_is_found(monkeypatch, tmp_path):
    monkeypatch.delenv("TRT_WOQ_PLUGIN_PATH", raising=False)
    (tmp_path / "libtrt_woq_plugin.so").write_bytes(b"x")
    monkeypatch.setattr(_libs, "_PACKAGE_LIB_DIR", tmp_path)
    assert plugin.plugin_library_path() == tmp_path / "libtrt_woq_plugin.so"


def test_missing_library_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.delenv("TRT_WOQ_PLUGIN_PATH", raising=False)
    monkeypatch.setattr(_libs, "_PACKAGE_LIB_DIR", tmp_path)
    with pytest.raises(PluginLibraryNotFoundError) as info:
        plugin.plugin_library_path()
    msg = str(info.value)
    assert "libtrt_woq_plugin.so" in msg and "TRT_WOQ_PLUGIN_PATH" in msg and "TENSORRT_INCLUDE_DIR" in msg


def test_import_tensorrt_missing_says_so(no_tensorrt):
    with pytest.raises(TensorRTNotFoundError, match="TensorRT is not available: `import tensorrt` failed"):
        plugin.import_tensorrt()


def test_tensorrt_rtx_is_selected_like_polygraphy(monkeypatch, no_tensorrt):
    monkeypatch.setenv("POLYGRAPHY_USE_TENSORRT_RTX", "1")
    assert plugin.tensorrt_module_name() == "tensorrt_rtx"
    with pytest.raises(TensorRTNotFoundError, match="import tensorrt_rtx"):
        plugin.import_tensorrt()
    monkeypatch.setenv("TRT_WOQ_TENSORRT_MODULE", "tensorrt")
    assert plugin.tensorrt_module_name() == "tensorrt"


def test_load_plugin_without_tensorrt_only_locates(no_tensorrt, fake_plugin):
    info = plugin.load_plugin()
    assert info.path == fake_plugin.resolve() and not info.registered
    assert "TensorRT is not available" in info.reason
    with pytest.raises(TensorRTNotFoundError):
        plugin.load_plugin(require_tensorrt=True)


def test_load_plugin_registers_once(fake_tensorrt, fake_plugin):
    trt = fake_tensorrt()
    info = plugin.load_plugin()
    assert info.registered and info.tensorrt == "tensorrt 10.99-fake"
    plugin.load_plugin()
    loads = [c for c in trt.calls if c[0] == "load_library"]
    assert loads == [("load_library", str(fake_plugin.resolve()))]
    assert ("get_creator", "WeightOnlyLinear", "1", "") in trt.calls


def test_load_plugin_without_the_creator_is_an_error(fake_tensorrt):
    fake_tensorrt(creator=False)
    with pytest.raises(PluginLoadError, match="no WeightOnlyLinear version 1 creator"):
        plugin.load_plugin()


def test_load_plugin_explicit_missing_path(no_tensorrt, tmp_path):
    with pytest.raises(PluginLibraryNotFoundError, match="no such file"):
        plugin.load_plugin(tmp_path / "missing.so")
