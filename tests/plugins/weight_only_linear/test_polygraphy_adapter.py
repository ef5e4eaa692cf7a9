"""libtrt_woq_polygraphy.so, loaded the way polygraphy --plugins loads a library (ctypes.CDLL), registers
libtrt_woq_plugin.so through trt_woq's runtime: checked in a child Python with a stand-in `tensorrt` module that
records load_library calls. Skipped when the adapter is not built."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
NAME = "libtrt_woq_polygraphy.so"


def _adapter() -> Path:
    env = os.environ.get("TRT_WOQ_POLYGRAPHY_ADAPTER")
    if env:
        return Path(env)
    for cand in sorted(ROOT.glob("build*/**/" + NAME)) + sorted((ROOT / "python" / "trt_woq" / "lib").glob(NAME)):
        return cand
    try:
        import trt_woq

        installed = Path(trt_woq.__file__).parent / "lib" / NAME
        if installed.is_file():
            return installed
    except ImportError:
        pass
    pytest.skip(f"{NAME} is not built (cmake --build build --target trt_woq_polygraphy)")


FAKE_TENSORRT = '''
__version__ = "0-fake"
class _Registry:
    def load_library(self, path):
        print("LOAD_LIBRARY", path, flush=True)
        return object()
    def get_creator(self, name, version, namespace):
        return object() if (name, version, namespace) == ("WeightOnlyLinear", "1", "") else None
_registry = _Registry()
def get_plugin_registry():
    return _registry
'''


def _run(tmp_path, adapter, extra_env=None):
    (tmp_path / "fake").mkdir(exist_ok=True)
    (tmp_path / "fake" / "tensorrt.py").write_text(FAKE_TENSORRT)
    code = textwrap.dedent(f"""
        import ctypes
        ctypes.CDLL({str(adapter)!r})
        print("LOADED", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), str(ROOT / "python"), str(ROOT)]))
    env.pop("TRT_WOQ_TENSORRT_MODULE", None)
    env.pop("POLYGRAPHY_USE_TENSORRT_RTX", None)
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_cdll_registers_the_plugin_beside_it(tmp_path):
    adapter = _adapter()
    proc = _run(tmp_path, adapter)
    assert proc.returncode == 0, proc.stderr
    expected = (adapter.parent / "libtrt_woq_plugin.so").resolve()
    if not expected.is_file():
        pytest.skip(f"libtrt_woq_plugin.so is not built beside {adapter}")
    assert f"LOAD_LIBRARY {expected}" in proc.stdout
    assert "registered" in proc.stderr and proc.stdout.strip().endswith("LOADED")


def test_opt_out(tmp_path):
    proc = _run(tmp_path, _adapter(), {"TRT_WOQ_NO_AUTOLOAD": "1"})
    assert proc.returncode == 0 and "LOAD_LIBRARY" not in proc.stdout


def test_without_tensorrt_the_error_is_reported_not_fatal(tmp_path):
    adapter = _adapter()
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "tensorrt.py").write_text("raise ImportError('no TensorRT here')\n")
    code = f"import ctypes; ctypes.CDLL({str(adapter)!r}); print('LOADED')"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), str(ROOT / "python"), str(ROOT)]))
    env.pop("TRT_WOQ_TENSORRT_MODULE", None)
    env.pop("POLYGRAPHY_USE_TENSORRT_RTX", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "LOADED" in proc.stdout
    assert "TensorRT is not available" in proc.stderr and "could not register" in proc.stderr
