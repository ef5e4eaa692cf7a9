"""Helpers shared by the rewrite passes: dtype choice, unique names, the quantize-once cache."""

from __future__ import annotations

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.progress import ProgressBar
from graph_passes.quantize import QuantizedWeight, quantize_rtn

ONNX_FLOAT = {"fp16": 10, "bf16": 16, "fp32": 1}  # onnx.TensorProto.FLOAT16 / BFLOAT16 / FLOAT


def op_act_dtype(match, config) -> tuple[str, bool]:
    """(activation dtype of the op, Casts needed): FP16/BF16 graphs keep theirs, FP32 graphs use config.act_dtype."""
    graph_act = match.graph_act
    if graph_act in ("fp16", "bf16"):
        return graph_act, False
    return config.act_dtype, config.act_dtype != "fp32"


class NameScope:
    """Tensor / node names not yet used in the graph."""

    def __init__(self, graph):
        self.used = set(graph.tensors().keys()) | {n.name for n in graph.nodes}

    def __call__(self, base: str) -> str:
        base = base or "woq"
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        return name


class QuantizeOnce:
    """Quantizes each distinct weight (match.key) once; entries hold whatever the pass builds from the result."""

    def __init__(self, config):
        self.config = config
        self.entries: dict = {}
        self.failed: dict = {}
        self.rel_errors: dict = {}  # key -> relative RMS reconstruction error of the weight

    def get(self, match, act_dtype: str, build):
        """(entry, shared): ``build(QuantizedWeight)`` -> entry for a new key; the float weight is freed after."""
        key = match.key(act_dtype)
        if key in self.failed:
            raise self.failed[key]
        if key in self.entries:
            return self.entries[key], True
        try:
            w = match.load_weight(self.config.external_data_dir)
            qw: QuantizedWeight = quantize_rtn(w, self.config.bits, self.config.group_size, self.config.asymmetric,
                                               act_dtype, self.config.clip_ratios, name=f"{match.node.name} "
                                               f"(weight '{match.source_name}')")
            del w
        except QuantizationError as exc:
            self.failed[key] = exc
            raise
        entry = build(qw)
        self.entries[key] = entry
        self.rel_errors[key] = qw.rel_error
        return entry, False


def progress_bar(total: int, config) -> ProgressBar:
    return ProgressBar(total, label=f"quantizing INT{config.bits}", enabled=config.progress)


def skip_reason_of(exc: QuantizationError) -> tuple[str, str]:
    """(groupable reason, detail) for a weight the quantizer refused."""
    msg = str(exc)
    if "NaN/Inf" in msg:
        return "NaN/Inf in weight", msg
    if "overflows" in msg:
        return "weight too large for the activation dtype", msg
    return "cannot quantize weight", msg


def bias_storage(bias: np.ndarray, dtype) -> np.ndarray:
    return np.asarray(bias, np.float64).astype(dtype)
