"""Epilogues: the elementwise function applied to ``X @ W + bias`` inside the kernel.

``reference(y, **params)`` is the float64 numpy function (params: e.g. ``clip_min`` / ``clip_max``);
``onnx_patterns`` lists the op-type sequences following a rewritten node that the pass fuses into the epilogue
(empty for ``none``). The optional bias input is not an epilogue: it is added before any of them.
C enum ``trt_woq_epilogue``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from graph_passes.registry import Registry


@dataclass(frozen=True)
class Epilogue:
    name: str                                   # CLI / report / op attribute name
    c_name: str                                 # enum trt_woq_epilogue in kernels.h
    c_enum: int
    reference: Callable                         # (y float64, **params) -> float64, elementwise
    onnx_patterns: tuple[tuple[str, ...], ...]  # op-type sequences it replaces, e.g. (("Relu",),)
    tests: tuple[str, ...]                      # pytest ids


def identity(y: np.ndarray) -> np.ndarray:
    return np.asarray(y, np.float64)


EPILOGUES: Registry[Epilogue] = Registry("epilogue")
NONE = EPILOGUES.add(Epilogue(
    name="none", c_name="TRT_WOQ_EPILOGUE_NONE", c_enum=0, reference=identity, onnx_patterns=(),
    tests=("tests/graph_passes/test_op.py::test_reference_evaluator_vs_float64",)))

__all__ = ["EPILOGUES", "NONE", "Epilogue", "identity"]
