"""Accuracy of a quantized model run by TensorRT with the WeightOnlyLinear plugin, against its original run by ONNX
Runtime, through polygraphy's Comparator.

    from trt_woq.compare import compare_trt
    report = compare_trt("model.onnx", "model.woq.onnx", min_cosine=0.999)
    print(report.format())

This is what ``python -m trt_woq compare ORIGINAL QUANTIZED`` runs. Inputs, threshold and the report are those of
:mod:`graph_passes.compare` (same generated or real inputs, same metrics); the engine's profile spans the inputs'
shapes. The TensorRT side is :class:`TrtWoqRunner`, a polygraphy runner around
:class:`trt_woq.runtime.EngineRunner` (cuda-python buffers and stream).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict

from trt_woq.errors import TrtWoqError


def _polygraphy_base():
    try:
        from polygraphy.backend.base import BaseRunner
    except ImportError as exc:
        raise TrtWoqError(f"compare_trt needs polygraphy: pip install polygraphy ({exc})") from None
    return BaseRunner


def make_trt_runner(engine: bytes, *, plugin_path=None, name: str = "trt-woq"):
    """A polygraphy runner executing ``engine`` with :class:`~trt_woq.runtime.EngineRunner`."""
    base = _polygraphy_base()

    class TrtWoqRunner(base):
        def __init__(self):
            super().__init__(name=name, prefix="trt-woq-runner")
            self._runner = None

        def activate_impl(self):
            from trt_woq.runtime import EngineRunner

            self._runner = EngineRunner(engine, plugin_path=plugin_path)

        def get_input_metadata_impl(self):
            from polygraphy.common import TensorMetadata

            meta = TensorMetadata()
            for n, (dtype, shape) in self._runner.input_metadata().items():
                meta.add(n, dtype, [None if d < 0 else d for d in shape])
            return meta

        def infer_impl(self, feed_dict):
            start = time.perf_counter()
            out = self._runner.infer(feed_dict)
            self.inference_time = time.perf_counter() - start
            return OrderedDict(out)

        def deactivate_impl(self):
            if self._runner is not None:
                self._runner.close()
                self._runner = None

    return TrtWoqRunner()


def _profile(feeds: list[dict]) -> dict:
    """One optimization profile covering every sample: per input (min, opt = first sample, max) of the shapes."""
    profile = {}
    for name in feeds[0]:
        shapes = [f[name].shape for f in feeds]
        lo = tuple(min(d) for d in zip(*shapes))
        hi = tuple(max(d) for d in zip(*shapes))
        profile[name] = (lo, shapes[0], hi)
    return profile


def compare_trt(original_path: str | os.PathLike, quantized_path: str | os.PathLike, *,
                input_shapes: dict | None = None, seed: int = 0, min_cosine: float | None = None,
                data: str | None = None, data_script: str | None = None, samples: int | None = None,
                plugin_path: str | os.PathLike | None = None, precision: str = "auto",
                engine_path: str | os.PathLike | None = None):
    """Run ORIGINAL with ONNX Runtime (CPU) and QUANTIZED with TensorRT + the plugin on the same inputs.

    Returns a :class:`graph_passes.compare.CompareReport` (``.format()``, ``.passed``). Inputs, threshold and figures
    are graph_passes.compare's (:func:`graph_passes.compare.prepare`); the engine gets one profile spanning the
    inputs' shapes. ``engine_path`` keeps the built engine. Raises :class:`~trt_woq.errors.TrtWoqError` subclasses
    when TensorRT, the plugin library, polygraphy or cuda-python is missing, with the reason, and
    :class:`graph_passes.errors.UserError` for bad inputs.
    """
    from trt_woq.engine import build_engine
    from trt_woq.plugin import import_tensorrt

    import_tensorrt()  # fail early, before ONNX Runtime runs, with the message saying how to install it
    _polygraphy_base()
    try:
        from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
        from polygraphy.comparator import Comparator

        from graph_passes.compare import prepare
    except ImportError as exc:
        raise TrtWoqError(f"compare_trt needs onnx, onnxruntime, polygraphy and graph_passes: {exc}") from None

    original, _, feeds, report = prepare(
        original_path, quantized_path, "TensorRT with the trt_woq WeightOnlyLinear plugin",
        input_shapes=input_shapes, seed=seed, min_cosine=min_cosine, data=data, data_script=data_script,
        samples=samples)
    engine = build_engine(report.quantized, engine_path, profiles=[_profile(feeds)], precision=precision,
                          plugin_path=plugin_path)
    runners = [OnnxrtRunner(SessionFromOnnx(report.original, providers=["CPUExecutionProvider"]), name="original"),
               make_trt_runner(engine, plugin_path=plugin_path, name="quantized")]
    try:
        results = Comparator.run(runners, data_loader=feeds)
    except Exception as exc:  # polygraphy wraps runner failures; keep the message
        raise TrtWoqError(f"running the models failed: {' '.join(str(exc).split())}") from None
    report.add_outputs(original, list(results["original"]), list(results["quantized"]), "the TensorRT engine")
    return report
