"""Accuracy of a quantized model run by TensorRT with the WeightOnlyLinear plugin, against its original run by ONNX
Runtime, through polygraphy's Comparator.

    from trt_woq.compare import compare_trt
    report = compare_trt("model.onnx", "model.woq.onnx", min_cosine=0.999)
    print(report.format())

This is what ``python -m graph_passes compare ORIGINAL QUANTIZED --trt`` runs. Inputs and the report are those of
:mod:`graph_passes.compare` (same seeded generator, same metrics); the engine is built for exactly the generated
input shapes. The TensorRT side is :class:`TrtWoqRunner`, a polygraphy runner around
:class:`trt_woq.runtime.EngineRunner` (cuda-python buffers and stream).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from pathlib import Path

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


def compare_trt(original_path: str | os.PathLike, quantized_path: str | os.PathLike, *,
                input_shapes: dict | None = None, seed: int = 0, min_cosine: float | None = None,
                plugin_path: str | os.PathLike | None = None, precision: str = "auto",
                engine_path: str | os.PathLike | None = None):
    """Run ORIGINAL with ONNX Runtime (CPU) and QUANTIZED with TensorRT + the plugin on the same inputs.

    Returns a :class:`graph_passes.compare.CompareReport` (``.format()``, ``.passed``). ``input_shapes`` fixes
    dynamic dimensions as in graph_passes.compare; the engine gets one profile with exactly those shapes.
    ``engine_path`` keeps the built engine. Raises :class:`~trt_woq.errors.TrtWoqError` subclasses when TensorRT,
    the plugin library, polygraphy or cuda-python is missing, with the reason.
    """
    from trt_woq.engine import build_engine
    from trt_woq.plugin import import_tensorrt

    import_tensorrt()  # fail early, before ONNX Runtime runs, with the message saying how to install it
    _polygraphy_base()
    try:
        import onnx
        from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx
        from polygraphy.comparator import Comparator

        from graph_passes.compare import CompareReport, compare_arrays, make_inputs
    except ImportError as exc:
        raise TrtWoqError(f"compare_trt needs onnx, onnxruntime, polygraphy and graph_passes: {exc}") from None

    original_path, quantized_path = str(original_path), str(quantized_path)
    for p in (original_path, quantized_path):
        if not Path(p).is_file():
            raise TrtWoqError(f"{p}: no such file")
    original = onnx.load(original_path, load_external_data=False)
    feeds = make_inputs(original, input_shapes, seed)
    engine = build_engine(quantized_path, engine_path, profiles=[{k: v.shape for k, v in feeds.items()}],
                          precision=precision, plugin_path=plugin_path)
    runners = [OnnxrtRunner(SessionFromOnnx(original_path, providers=["CPUExecutionProvider"]), name="original"),
               make_trt_runner(engine, plugin_path=plugin_path, name="quantized")]
    try:
        results = Comparator.run(runners, data_loader=[feeds])
    except Exception as exc:  # polygraphy wraps runner failures; keep the message
        raise TrtWoqError(f"running the models failed: {exc}") from None
    o_out = results["original"][0]
    q_out = results["quantized"][0]
    report = CompareReport(original_path, quantized_path, "TensorRT with the trt_woq WeightOnlyLinear plugin",
                           {k: v.shape for k, v in feeds.items()}, seed, min_cosine)
    for out in original.graph.output:
        if out.name not in q_out:
            raise TrtWoqError(f"output {out.name} of the original model is missing from the TensorRT engine")
        report.outputs.append(compare_arrays(out.name, o_out[out.name], q_out[out.name]))
    return report
