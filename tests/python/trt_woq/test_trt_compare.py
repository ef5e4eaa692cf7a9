"""compare_trt refuses cleanly where TensorRT is missing (what `python -m trt_woq compare` shows)."""

from __future__ import annotations

import pytest

from trt_woq.errors import TensorRTNotFoundError


def test_compare_trt_without_tensorrt(no_tensorrt, tiny_model):
    from trt_woq.compare import compare_trt

    with pytest.raises(TensorRTNotFoundError, match="TensorRT is not available"):
        compare_trt(tiny_model, tiny_model)


def test_polygraphy_runner_wraps_engine_runner(monkeypatch):
    """The polygraphy runner drives EngineRunner: activate, metadata, infer, deactivate (EngineRunner faked)."""
    pytest.importorskip("polygraphy")
    import numpy as np

    from trt_woq import compare, runtime

    events = []

    class FakeEngineRunner:
        def __init__(self, engine, plugin_path=None):
            events.append(("init", engine))

        def input_metadata(self):
            return {"X": (np.dtype(np.float32), (-1, 4))}

        def infer(self, feeds):
            return {"Y": feeds["X"] * 2}

        def close(self):
            events.append(("close",))

    monkeypatch.setattr(runtime, "EngineRunner", FakeEngineRunner)
    runner = compare.make_trt_runner(b"E", name="q")
    with runner:
        meta = runner.get_input_metadata(use_numpy_dtypes=False)
        assert list(meta.keys()) == ["X"]
        out = runner.infer({"X": np.ones((3, 4), np.float32)})
    np.testing.assert_array_equal(out["Y"], np.full((3, 4), 2, np.float32))
    assert events == [("init", b"E"), ("close",)]


def test_engine_profile_spans_every_sample():
    import numpy as np

    from trt_woq.compare import _profile

    feeds = [{"ids": np.zeros((1, 7), np.int64), "flag": np.array(True)},
             {"ids": np.zeros((2, 3), np.int64), "flag": np.array(False)},
             {"ids": np.zeros((1, 12), np.int64), "flag": np.array(True)}]
    assert _profile(feeds) == {"ids": ((1, 3), (1, 7), (2, 12)), "flag": ((), (), ())}
