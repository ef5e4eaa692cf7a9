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
Activations read through one weight (the two branches of a merged decoder, a layer applied twice) are calibrated
as one (:func:`linked_inputs`), so the weight stays one weight; linears that no sample reaches (an If branch never
taken) are quantized with ``rtn``, and the report says so.
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
from graph_passes.registry.methods import rtn

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
    """Quantize the weight (its rows already multiplied by the AWQ scales) with the output-error clip search; rtn
    when no calibration sample reached the input."""
    calib = _need(stats, name)
    if calib.clip is None:
        return rtn(w, fmt, group_size, asymmetric, act_dtype, clip_ratios, name=name)
    codec = codec_for(fmt, group_size, asymmetric, act_dtype, clip_ratios, name)
    return awq_mod.quantize_scaled(np.asarray(w, np.float32), calib.clip, codec)


def gptq(w, fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str = "weight", stats=None):
    calib = _need(stats, name)
    if calib.stats is None or not calib.stats.n_rows:
        return rtn(w, fmt, group_size, asymmetric, act_dtype, clip_ratios, name=name)
    # Every other clip ratio: the group search is most of GPTQ's time, and the error feedback makes the finer grid
    # useless (all-MiniLM-L6-v2 INT4 g128: 0.98256 mean cosine with 10 ratios, 0.98254 with 19; 0.9757 with 1).
    codec = codec_for(fmt, group_size, asymmetric, act_dtype, tuple(clip_ratios)[::2], name)
    return gptq_quantize(w, calib.inverse_hessian(name), codec, name=name)


def _need(stats, name: str) -> InputCalibration:
    if not isinstance(stats, InputCalibration):
        raise QuantizationError(f"{name}: no calibration statistics for its input (the calibrated methods cover "
                                f"MatMul / Gemm inputs that the samples reach); use --method rtn for it")
    return stats


# ---------------------------------------------------------------------------------------------------- pipeline
class Calibration:
    """The calibration of one quantize run. Statistics are gathered lazily, one budget-sized pass of activations at
    a time in graph order (``collect.plan_passes``), and a pass's Gram matrices are dropped when the next is
    gathered: AWQ reduces each to what its clip search needs in :meth:`prepare`; GPTQ's come as the rewrite pass
    reaches their nodes (:meth:`for_tensor`).

    ``linked``: the activations calibrated together (:func:`linked_inputs`: read through one weight), each list in
    one pass; their rows are pooled (:meth:`TensorStats.combine`): one AWQ scale, one GPTQ Hessian, so that a weight
    read through several activations stays one weight. A group that no sample reaches is quantized as ``rtn``."""

    def __init__(self, method: str, model, feeds, tensors: dict[str, int], *, base_dir, config, report,
                 budget: int = DEFAULT_BUDGET, dtypes: dict | None = None, linked: list[list[str]] | None = None):
        self.method, self.model, self.feeds, self.tensors = method, model, feeds, tensors
        self.base_dir, self.progress, self.report = base_dir, config.progress, report
        self.dtypes = dtypes or {}
        self.max_rows = DEFAULT_MAX_ROWS if method == "awq" else 0
        linked = linked or [[n] for n in tensors]
        self.group_of = {n: tuple(group) for group in linked for n in group}
        sizes = {i: sum(TensorStats.nbytes_for(tensors[n], gram=True, max_rows=self.max_rows) for n in group)
                 for i, group in enumerate(linked)}
        self.plan = [[n for i in ids for n in linked[i]] for ids in plan_passes(sizes, budget)]
        self.pass_of = {n: i for i, names in enumerate(self.plan) for n in names}
        self.inputs: dict[str, InputCalibration] = {}   # the current pass's (GPTQ) or every input's (AWQ)
        self.aliases: dict[str, str] = {}               # AWQ: name of a scaled input -> the original activation
        self.folds: list[tuple[Fold, float]] = []
        self._loaded = None

    def _load(self, index: int) -> dict[tuple, TensorStats]:
        """Gather pass ``index`` (GPTQ: the previous pass's statistics are dropped first): the pooled statistics of
        each group of linked activations."""
        if self.method == "gptq":
            self.inputs.clear()
        data = collect(self.model, {n: self.tensors[n] for n in self.plan[index]}, self.feeds,
                       base_dir=self.base_dir, gram=True, max_rows=self.max_rows, progress=self.progress,
                       label=f"calibrating {index + 1}/{len(self.plan)}" if len(self.plan) > 1 else "calibrating",
                       seeds={n: i for i, n in enumerate(self.tensors)}, dtypes=self.dtypes)
        if self._loaded is None:
            self.report.notes.append(f"calibration: {data.samples} sample(s), {data.tokens} token(s) per linear "
                                     f"input, statistics in {len(self.plan)} pass(es), method {self.method}")
        self._loaded = index
        groups = dict.fromkeys(self.group_of[n] for n in self.plan[index])
        pooled = {g: TensorStats.combine([data.stats[n] for n in g]) for g in groups}
        for g, st in pooled.items():
            if not st.n_rows:
                self.report.notes.append(f"calibration: no sample reaches {', '.join(g)}; the linears reading it "
                                         f"are quantized with rtn")
        return pooled

    def for_tensor(self, name: str) -> InputCalibration | None:
        name = self.aliases.get(name, name)
        if name not in self.pass_of:
            return None
        if self.method == "gptq" and name not in self.inputs:
            for group, st in self._load(self.pass_of[name]).items():
                calib = InputCalibration(stats=st)
                self.inputs.update(dict.fromkeys(group, calib))
        return self.inputs.get(name)

    def prepare(self, graph, config, report) -> None:
        """AWQ's graph edit, pass by pass (nothing for GPTQ): per group of linked activations the scale search, its
        linears' weights times s (one new constant per weight), each activation's 1/s folded or multiplied, and the
        clip search's statistics kept."""
        if self.method != "awq":
            return
        from graph_passes.passes._common import NameScope
        from graph_passes.passes.match import find_linear_layers

        matches, _ = find_linear_layers(graph, config)
        groups: dict[tuple, list] = {}
        for m in matches:
            if m.x.name in self.group_of:
                groups.setdefault(self.group_of[m.x.name], []).append(m)
        names = NameScope(graph)
        with progress_bar(len(groups), "awq scale search", self.progress, unit="input") as bar:
            for index in range(len(self.plan)):
                for group, st in self._load(index).items():
                    if group in groups:
                        self._scale(graph, config, groups[group], st, names)
                    bar.update(group in groups)
        graph.cleanup()
        for fold, alpha in self.folds:
            report.notes.append(f"awq: {fold.describe()} (alpha {alpha:.2f})")

    def _scale(self, graph, config, ms: list, stats: TensorStats, names) -> None:
        x_names = list(dict.fromkeys(m.x.name for m in ms))
        if not stats.n_rows:
            self.inputs.update(dict.fromkeys(x_names, InputCalibration()))
            return
        codec = codec_for(config.weight_format, config.group_size, config.asymmetric, config.act_dtype,
                          config.clip_ratios, ms[0].node.name)
        ms = [_current(m) for m in ms]
        per_weight = by_weight(ms)
        weights = [same[0].load_weight(config.external_data_dir) for same in per_weight]
        found = awq_mod.search_scales(weights, stats, codec)
        calib = InputCalibration(scales=found.scales,
                                 clip=awq_mod.clip_stats(stats, found.scales, codec.rows_per_group(ms[0].k)))
        self.inputs.update(dict.fromkeys(x_names, calib))
        if found.identity:
            return
        for same, w in zip(per_weight, weights):
            _set_weight(same, w * found.scales[:, None], names)
        for x_name in x_names:
            readers = [m for m in ms if m.x.name == x_name]
            fold = fold_input_scale(graph, readers[0].x, [m.node for m in readers], found.scales, names,
                                    readers[0].dtype, config.external_data_dir)
            self.aliases[readers[0].node.inputs[0].name] = x_name
            self.folds.append((fold, found.alpha))


def _current(match):
    """``match`` reading the constant its node holds now: an earlier fold of another input's 1/s may have replaced
    the weight of a MatMul (its columns divided) since the graph was matched."""
    import dataclasses

    import onnx_graphsurgeon as gs

    now = match.node.inputs[1]
    if not isinstance(now, gs.Constant) or now is match.source:
        return match
    return dataclasses.replace(match, source=now, source_name=now.name)


def _set_weight(matches: list, w: np.ndarray, names) -> None:
    """Point the linears (all reading one weight the same way) at one new constant holding ``w`` [K, N] (in the
    graph's dtype, Gemm's orientation)."""
    import onnx_graphsurgeon as gs

    match = matches[0]
    values = w.T if match.node.op == "Gemm" and match.transpose else w
    const = gs.Constant(names(f"{match.source_name}_awq"), np.ascontiguousarray(values.astype(match.dtype)))
    for m in matches:
        m.node.inputs[1] = const
        if m.node.op == "Gemm":
            m.node.attrs["alpha"] = 1.0  # load_weight included alpha


def by_weight(matches) -> list[list]:
    """``matches`` grouped by the weight they read (``match.key``), in order of first appearance: the linears of one
    group get one new constant when the weight is scaled."""
    groups: dict[tuple, list] = {}
    for m in matches:
        groups.setdefault(m.key(None), []).append(m)
    return list(groups.values())


def linked_inputs(matches) -> list[list[str]]:
    """The activation names of ``matches`` grouped so that the inputs of linears reading one weight (the branches
    of a merged decoder, a layer applied twice) are in one group; in order of first appearance."""
    order: dict[str, int] = {}
    for m in matches:
        order.setdefault(m.x.name, len(order))
    parent = {n: n for n in order}

    def root(n: str) -> str:
        while parent[n] != n:
            n = parent[n]
        return n

    first_reader: dict[tuple, str] = {}
    for m in matches:
        a, b = sorted((root(m.x.name), root(first_reader.setdefault(m.key(None), m.x.name))), key=order.get)
        parent[b] = a
    groups: dict[str, list[str]] = {}
    for n in parent:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())


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
                       budget=budget, dtypes={m.x.name: m.dtype for m in matches}, linked=linked_inputs(matches))
