"""Helpers shared by the rewrite passes: dtype choice, unique names, the quantize-once cache, the pass loop's
setup and bookkeeping."""

from __future__ import annotations

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.passes.checks import WeightCheckError, quantize_checked
from graph_passes.passes.match import find_linear_layers
from graph_passes.progress import ProgressBar
from graph_passes.registry.methods import METHODS
from graph_passes.report import QuantReport, Rewritten

ONNX_FLOAT = {"fp16": 10, "bf16": 16, "fp32": 1}  # onnx.TensorProto.FLOAT16 / BFLOAT16 / FLOAT


def op_act_dtype(match, config) -> tuple[str, bool]:
    """(activation dtype of the op, Casts needed): FP16/BF16 graphs keep theirs, FP32 graphs use config.act_dtype."""
    graph_act = match.graph_act
    if graph_act in ("fp16", "bf16"):
        return graph_act, False
    return config.act_dtype, config.act_dtype != "fp32"


class NameScope:
    """Tensor / node names not yet used: in an onnx-graphsurgeon ``graph`` and its subgraphs, or in the set ``used``
    (the names of an onnx.ModelProto's graphs), which the scope then extends with the names it gives."""

    def __init__(self, graph=None, used: set[str] | None = None):
        if graph is not None:
            graphs = [graph, *graph.subgraphs(recursive=True)]
            used = {name for g in graphs for name in g.tensors()} | {n.name for g in graphs for n in g.nodes}
        self.used = set() if used is None else used

    def __call__(self, base: str) -> str:
        base = base or "woq"
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        return name

    def replacing(self, node, fallback: str) -> str:
        """The name of the node that takes ``node``'s place: ``node``'s own (it leaves the graph, and users find
        their layer by it in reports and engines), else a new one from ``fallback``."""
        return node.name or self(fallback)


class QuantizeOnce:
    """Quantizes each distinct weight (match.key) once with the configured method and weight format; entries hold
    whatever the pass builds from the result."""

    def __init__(self, config):
        self.config = config
        self.method = METHODS.get(config.method)
        self.fmt = config.weight_format
        self.entries: dict = {}
        self.failed: dict = {}
        self.rel_errors: dict = {}  # key -> relative RMS reconstruction error of the weight

    def get(self, match, act_dtype: str, build):
        """(entry, shared): ``build(quantized)`` -> entry for a new key; the float weight is freed after."""
        key = match.key(act_dtype)
        if key in self.failed:
            raise self.failed[key]
        if key in self.entries:
            return self.entries[key], True
        try:
            w = match.load_weight(self.config.external_data_dir)
            c = self.config
            name = f"{match.node.name} (weight '{match.source_name}')"
            stats = None if c.calibration is None else c.calibration.for_tensor(match.x.name)
            qw = quantize_checked(lambda: self.method.quantize(w, self.fmt, c.group_size, c.asymmetric, act_dtype,
                                                               c.clip_ratios, name=name, stats=stats),
                                  w, act_dtype, match.graph_act == "fp32", name)
            del w
        except QuantizationError as exc:
            self.failed[key] = exc
            raise
        entry = build(qw)
        self.entries[key] = entry
        self.rel_errors[key] = qw.rel_error
        return entry, False


def progress_bar(total: int, config) -> ProgressBar:
    return ProgressBar(total, label=f"quantizing {config.weight_format.label}", enabled=config.progress)


def skip_reason_of(exc: QuantizationError) -> tuple[str, str]:
    """(groupable reason, detail) for a weight the quantizer refused."""
    msg = str(exc)
    if isinstance(exc, WeightCheckError):
        return exc.reason, msg
    if "NaN/Inf" in msg:
        return "NaN/Inf in weight", msg
    if "overflows" in msg:
        return "weight too large for the activation dtype", msg
    return "cannot quantize weight", msg


def bias_storage(bias: np.ndarray, dtype) -> np.ndarray:
    return np.asarray(bias, np.float64).astype(dtype)


class PassRun:
    """What a rewrite pass sets up before its loop: the report, the matches of ``find`` (the op's matcher; skips
    already reported), unique names, the quantize-once cache and the progress bar."""

    def __init__(self, graph, config, report: QuantReport | None, find=find_linear_layers):
        self.report = report if report is not None else QuantReport()
        self.matches, skips = find(graph, config)
        for s in skips:
            self.report.skip(s.ref, s.reason, s.detail)
        self.names = NameScope(graph)
        self.cache = QuantizeOnce(config)
        self.bar = progress_bar(len(self.matches), config)

    def quantize(self, match, act_dtype: str, build):
        """``(entry, shared)`` from the cache, or None after reporting the skip when the quantizer refuses."""
        try:
            return self.cache.get(match, act_dtype, build)
        except QuantizationError as exc:
            self.report.skip(match.ref, *skip_reason_of(exc))
            self.bar.update(match.ref.name)
            return None

    def rewritten(self, match, act_dtype: str, casts: bool, shared: bool) -> None:
        """Records one rewritten node and advances the progress bar."""
        self.report.rewritten.append(Rewritten(node=match.ref.name, pattern=match.pattern, weight=match.source_name,
                                               k=match.k, n=match.n,
                                               weight_rel_error=self.cache.rel_errors[match.key(act_dtype)],
                                               act_dtype=act_dtype, casts=casts, shared=shared))
        self.bar.update(match.ref.name)
