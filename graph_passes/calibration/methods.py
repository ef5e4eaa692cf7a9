"""The calibrated methods ``awq`` and ``gptq``: the pipeline's calibration step and their per-weight quantizers.

Pipeline (``graph_passes.pipeline``): :func:`calibrate` takes the samples of ``--calib-data`` / ``--calib-script``
(read and checked by ``graph_passes.feeds``) and plans the statistics of every quantizable linear's input into
budget-sized passes;
:class:`Calibration` gathers them with ONNX Runtime (``collect``) when needed, one pass at a time: AWQ in
:meth:`Calibration.prepare`, right after the graph is imported (scale search and graph edit, ``fold``), GPTQ as the
rewrite pass reaches each node. The rewrite pass quantizes each weight with the method's quantizer, which gets the
node's :class:`InputCalibration` as ``stats``. The weight format enters only through its
:class:`~graph_passes.calibration.codec.GroupCodec` (:data:`CODECS`, by format name).

  * ``awq``: per activation (the linears reading it together, e.g. q/k/v), the AWQ scale search, the graph edit,
    then each weight with the output-error clip search.
  * ``gptq``: GPTQ with the format's group search at each group's first row; the dampening grows as calibration
    rows get few compared to K (:func:`gptq_damp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graph_passes.calibration import awq as awq_mod
from graph_passes.calibration.codec import GroupCodec, fp6_codec, int_codec
from graph_passes.calibration.collect import DEFAULT_BUDGET, DEFAULT_MAX_ROWS, collect, plan_passes, progress_bar
from graph_passes.calibration.fold import Fold, fold_input_scale
from graph_passes.calibration.gptq import DEFAULT_DAMP, InverseHessian, gptq_quantize, inverse_hessian
from graph_passes.calibration.stats import TensorStats
from graph_passes.errors import QuantizationError, UserError

# weight format name -> factory(bits, group_size, asymmetric, act_dtype, clip_ratios, name) -> GroupCodec
CODECS = {"int8": int_codec, "int4": int_codec, "fp6": fp6_codec}


def codec_for(fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str) -> GroupCodec:
    factory = CODECS.get(fmt.name)
    if factory is None:
        raise QuantizationError(f"{name}: no calibrated quantization for {fmt.label} yet; use --method rtn")
    return factory(fmt.bits, group_size, asymmetric, act_dtype, clip_ratios, name)


def gptq_damp(rows: int, k: int) -> float:
    """Relative dampening: 1 % of the mean diagonal with plenty of rows, up to 10 % when rows are as few as K
    (fewer rows than inputs leave H singular, and few rows make its small eigenvalues noise)."""
    return float(np.clip(DEFAULT_DAMP * 10 * k / max(rows, 1), DEFAULT_DAMP, 10 * DEFAULT_DAMP))


@dataclass
class InputCalibration:
    """What a calibrated method gets (as ``stats``) for a node: what it needs of the node's input activation.
    GPTQ: ``stats`` (the Gram matrix); AWQ: ``scales`` (already multiplied into the weight's rows) and ``clip``."""

    stats: TensorStats | None = None
    scales: np.ndarray | None = None
    clip: awq_mod.ClipStats | None = None
    _hinv: InverseHessian | None = field(default=None, repr=False)

    def inverse_hessian(self, name: str) -> InverseHessian:
        """Cached: the linears sharing this input share it."""
        if self._hinv is None:
            st = self.stats
            self._hinv = inverse_hessian(st.gram, st.n_rows, gptq_damp(st.n_rows, st.k), name)
        return self._hinv


def awq(w, fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str = "weight", stats=None):
    """Quantize the weight (its rows already multiplied by the AWQ scales) with the output-error clip search."""
    calib = _need(stats, name, "clip")
    codec = codec_for(fmt, group_size, asymmetric, act_dtype, clip_ratios, name)
    return awq_mod.quantize_scaled(np.asarray(w, np.float32), calib.clip, codec)


def gptq(w, fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str = "weight", stats=None):
    calib = _need(stats, name, "stats")
    # Every other clip ratio: the group search is most of GPTQ's time, and the error feedback makes the finer grid
    # useless (all-MiniLM-L6-v2 INT4 g128: 0.98256 mean cosine with 10 ratios, 0.98254 with 19; 0.9757 with 1).
    codec = codec_for(fmt, group_size, asymmetric, act_dtype, tuple(clip_ratios)[::2], name)
    return gptq_quantize(w, calib.inverse_hessian(name), codec, name=name)


def _need(stats, name: str, what: str) -> InputCalibration:
    if not isinstance(stats, InputCalibration) or getattr(stats, what) is None:
        raise QuantizationError(f"{name}: no calibration statistics for its input (the calibrated methods cover "
                                f"MatMul / Gemm inputs that the samples reach); use --method rtn for it")
    return stats


# ---------------------------------------------------------------------------------------------------- pipeline
class Calibration:
    """The calibration of one quantize run. Statistics are gathered lazily, one budget-sized pass of activations at
    a time in graph order (``collect.plan_passes``), and a pass's Gram matrices are dropped when the next is
    gathered: AWQ reduces each to what its clip search needs in :meth:`prepare`; GPTQ's come as the rewrite pass
    reaches their nodes (:meth:`for_tensor`)."""

    def __init__(self, method: str, model, feeds, tensors: dict[str, int], *, base_dir, config, report,
                 budget: int = DEFAULT_BUDGET):
        self.method, self.model, self.feeds, self.tensors = method, model, feeds, tensors
        self.base_dir, self.progress, self.report = base_dir, config.progress, report
        self.max_rows = DEFAULT_MAX_ROWS if method == "awq" else 0
        sizes = {n: TensorStats.nbytes_for(k, gram=True, max_rows=self.max_rows) for n, k in tensors.items()}
        self.plan = plan_passes(sizes, budget)
        self.pass_of = {n: i for i, names in enumerate(self.plan) for n in names}
        self.inputs: dict[str, InputCalibration] = {}   # the current pass's (GPTQ) or every input's (AWQ)
        self.aliases: dict[str, str] = {}               # AWQ: name of a scaled input -> the original activation
        self.folds: list[tuple[Fold, float]] = []
        self._loaded = None

    def _load(self, index: int) -> dict[str, TensorStats]:
        """Gather pass ``index`` (GPTQ: the previous pass's statistics are dropped first)."""
        if self.method == "gptq":
            self.inputs.clear()
        data = collect(self.model, {n: self.tensors[n] for n in self.plan[index]}, self.feeds,
                       base_dir=self.base_dir, gram=True, max_rows=self.max_rows, progress=self.progress,
                       label=f"calibrating {index + 1}/{len(self.plan)}" if len(self.plan) > 1 else "calibrating",
                       seeds={n: i for i, n in enumerate(self.tensors)})
        if self._loaded is None:
            self.report.notes.append(f"calibration: {data.samples} sample(s), {data.tokens} token(s) per linear "
                                     f"input, statistics in {len(self.plan)} pass(es), method {self.method}")
        self._loaded = index
        return data.stats

    def for_tensor(self, name: str) -> InputCalibration | None:
        name = self.aliases.get(name, name)
        if name not in self.pass_of:
            return None
        if self.method == "gptq" and name not in self.inputs:
            self.inputs.update({n: InputCalibration(stats=s) for n, s in self._load(self.pass_of[name]).items()})
        return self.inputs.get(name)

    def prepare(self, graph, config, report) -> None:
        """AWQ's graph edit, pass by pass (nothing for GPTQ): per activation the scale search, its linears' weights
        times s, 1/s folded or multiplied, and the clip search's statistics kept."""
        if self.method != "awq":
            return
        from graph_passes.passes._common import NameScope
        from graph_passes.passes.match import find_linear_layers

        matches, _ = find_linear_layers(graph, config)
        groups: dict[str, list] = {}
        for m in matches:
            if m.x.name in self.pass_of:
                groups.setdefault(m.x.name, []).append(m)
        names = NameScope(graph)
        with progress_bar(len(groups), "awq scale search", self.progress, unit="input") as bar:
            for index, tensors in enumerate(self.plan):
                stats = self._load(index)
                for x_name in tensors:
                    if x_name in groups and stats[x_name].n_rows:
                        self._scale(graph, config, groups[x_name], stats[x_name], names)
                    bar.update(x_name in groups)
                del stats
        graph.cleanup()
        for fold, alpha in self.folds:
            report.notes.append(f"awq: {fold.describe()} (alpha {alpha:.2f})")

    def _scale(self, graph, config, ms: list, stats: TensorStats, names) -> None:
        codec = codec_for(config.weight_format, config.group_size, config.asymmetric, config.act_dtype,
                          config.clip_ratios, ms[0].node.name)
        weights = [m.load_weight(config.external_data_dir) for m in ms]
        found = awq_mod.search_scales(weights, stats, codec)
        x_name = ms[0].x.name
        calib = InputCalibration(scales=found.scales,
                                 clip=awq_mod.clip_stats(stats, found.scales, codec.rows_per_group(ms[0].k)))
        self.inputs[x_name] = calib
        if found.identity:
            return
        for m, w in zip(ms, weights):
            _set_weight(m, w * found.scales[:, None], names)
        fold = fold_input_scale(graph, ms[0].x, [m.node for m in ms], found.scales, names, ms[0].dtype,
                                config.external_data_dir)
        self.aliases[ms[0].node.inputs[0].name] = x_name
        self.folds.append((fold, found.alpha))


def _set_weight(match, w: np.ndarray, names) -> None:
    """Point the linear at a new constant holding ``w`` [K, N] (in the graph's dtype, Gemm's orientation)."""
    import onnx_graphsurgeon as gs

    values = w.T if match.node.op == "Gemm" and match.transpose else w
    const = gs.Constant(names(f"{match.source_name}_awq"), np.ascontiguousarray(values.astype(match.dtype)))
    match.node.inputs[1] = const
    if match.node.op == "Gemm":
        match.node.attrs["alpha"] = 1.0  # load_weight included alpha


def calibrate(model, config, feeds: list[dict[str, np.ndarray]] | None, *, base_dir: str | None, report,
              budget: int = DEFAULT_BUDGET) -> Calibration:
    """The calibration of ``model`` (ModelProto, external data on disk in ``base_dir``) on ``feeds`` (checked by
    ``graph_passes.feeds``): the inputs of the quantizable linears planned into passes; statistics come when needed."""
    import onnx_graphsurgeon as gs

    from graph_passes.passes.match import find_linear_layers

    if not feeds:
        raise UserError(f"--method {config.method} needs calibration data: --calib-data FILE.npz or "
                        f"--calib-script FILE.py[:FUNC]")
    matches, _ = find_linear_layers(gs.import_onnx(model), config)
    tensors = {m.x.name: m.k for m in matches}
    return Calibration(config.method, model, feeds, tensors, base_dir=base_dir, config=config, report=report,
                       budget=budget)
