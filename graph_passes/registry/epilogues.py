"""Epilogues: the elementwise function applied to ``X @ W + bias`` inside the kernel.

``reference(y, **params)`` is the float64 numpy function (params: ``clip_min`` / ``clip_max`` for ``clip``);
``onnx_patterns`` lists the op-type sequences following a rewritten node that the fusion pass
(``graph_passes.passes.epilogue``) replaces by the epilogue (empty for ``none``); the pass recognises the
decomposed forms by evaluating the subgraph, so these sequences document what it fuses and the tests build each.
``onnx_twin`` names the standard ONNX op(s) the Q/DQ twin writes for the epilogue. The optional bias input is not an
epilogue: it is added before any of them. C enum ``trt_woq_epilogue``; the op attribute ``activation`` holds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.registry import Registry


@dataclass(frozen=True)
class Epilogue:
    name: str                                   # CLI / report name
    c_name: str                                 # enum trt_woq_epilogue in kernels.h
    c_enum: int                                 # also the op's ``activation`` attribute
    reference: Callable                         # (y float64, **params) -> float64, elementwise
    onnx_patterns: tuple[tuple[str, ...], ...]  # op-type sequences it replaces, e.g. (("Relu",),)
    tests: tuple[str, ...]                      # pytest ids
    params: tuple[str, ...] = ()                # names of the float parameters (op attributes), e.g. clip_min


def identity(y: np.ndarray) -> np.ndarray:
    return np.asarray(y, np.float64)


def relu(y: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(y, np.float64), 0.0)


def clip(y: np.ndarray, clip_min: float = -np.inf, clip_max: float = np.inf) -> np.ndarray:
    return np.clip(np.asarray(y, np.float64), clip_min, clip_max)


def silu(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, np.float64)
    return y / (1.0 + np.exp(-y))


erf = np.vectorize(math.erf, otypes=[np.float64])  # float64 erf without scipy


def gelu_erf(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, np.float64)
    return 0.5 * y * (1.0 + erf(y / math.sqrt(2.0)))


def gelu_tanh(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y, np.float64)
    return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y ** 3)))


_TESTS = ("tests/graph_passes/passes/test_epilogue.py::test_each_pattern_fuses_and_twin_agrees",
          "tests/graph_passes/test_op.py::test_reference_evaluator_vs_float64")

EPILOGUES: Registry[Epilogue] = Registry("epilogue")
NONE = EPILOGUES.add(Epilogue(
    name="none", c_name="TRT_WOQ_EPILOGUE_NONE", c_enum=0, reference=identity, onnx_patterns=(),
    tests=("tests/graph_passes/test_op.py::test_reference_evaluator_vs_float64",)))
RELU = EPILOGUES.add(Epilogue(
    name="relu", c_name="TRT_WOQ_EPILOGUE_RELU", c_enum=1, reference=relu, onnx_patterns=(("Relu",),),
    tests=_TESTS))
CLIP = EPILOGUES.add(Epilogue(
    name="clip", c_name="TRT_WOQ_EPILOGUE_CLIP", c_enum=2, reference=clip, onnx_patterns=(("Clip",),),
    tests=_TESTS, params=("clip_min", "clip_max")))
SILU = EPILOGUES.add(Epilogue(
    name="silu", c_name="TRT_WOQ_EPILOGUE_SILU", c_enum=3, reference=silu, onnx_patterns=(("Sigmoid", "Mul"),),
    tests=_TESTS))
GELU_ERF = EPILOGUES.add(Epilogue(
    name="gelu_erf", c_name="TRT_WOQ_EPILOGUE_GELU_ERF", c_enum=4, reference=gelu_erf,
    onnx_patterns=(("Gelu",), ("Div", "Erf", "Add", "Mul", "Mul"), ("Mul", "Erf", "Add", "Mul", "Mul")),
    tests=_TESTS))
GELU_TANH = EPILOGUES.add(Epilogue(
    name="gelu_tanh", c_name="TRT_WOQ_EPILOGUE_GELU_TANH", c_enum=5, reference=gelu_tanh,
    onnx_patterns=(("Gelu",), ("Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul"),
                   ("Mul", "Mul", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul")),
    tests=_TESTS))


def epilogue_by_enum(value: int, where: str = "") -> Epilogue:
    """The epilogue whose C enum (the op's ``activation`` attribute) is ``value``; QuantizationError otherwise."""
    for e in EPILOGUES:
        if e.c_enum == value:
            return e
    known = ", ".join(f"{e.c_enum} ({e.name})" for e in EPILOGUES)
    raise QuantizationError(f"{where + ': ' if where else ''}activation {value} is not one of {known}")


__all__ = ["CLIP", "EPILOGUES", "GELU_ERF", "GELU_TANH", "NONE", "RELU", "SILU", "Epilogue", "clip",
           "epilogue_by_enum", "erf", "gelu_erf", "gelu_tanh", "identity", "relu", "silu"]
