"""The calibrated methods ``awq`` and ``gptq``: the pipeline's calibration step and their per-weight quantizers.

Pipeline (``graph_passes.pipeline``): :func:`load_feeds` reads ``--calib-data`` / ``--calib-script``;
:func:`calibrate` runs ONNX Runtime on them and keeps per-activation statistics (``collect``); after the graph is
imported, :meth:`Calibration.prepare` applies AWQ's input scaling to the graph (``fold``); the rewrite pass then
quantizes each weight with the method's quantizer, which gets the :class:`InputCalibration` of the node's input as
``stats``. The weight format enters only through its :class:`~graph_passes.calibration.codec.GroupCodec`
(:data:`CODECS`, by format name).

  * ``awq``: per activation (the linears reading it together, e.g. q/k/v), the AWQ scale search, the graph edit,
    then each weight with the output-error clip search.
  * ``gptq``: GPTQ with the format's group search at each group's first row; the dampening grows as calibration
    rows get few compared to K (:func:`gptq_damp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graph_passes.calibration import awq as awq_mod
from graph_passes.calibration.codec import GroupCodec, int_codec
from graph_passes.calibration.collect import CalibrationData, collect
from graph_passes.calibration.fold import Fold, fold_input_scale
from graph_passes.calibration.gptq import DEFAULT_DAMP, InverseHessian, gptq_quantize, inverse_hessian
from graph_passes.calibration.stats import TensorStats
from graph_passes.errors import QuantizationError, UserError

# weight format name -> factory(bits, group_size, asymmetric, act_dtype, clip_ratios, name) -> GroupCodec
CODECS = {"int8": int_codec, "int4": int_codec}
CALIBRATED = ("awq", "gptq")


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
    """What a calibrated method gets (as ``stats``) for a node: the statistics of its input activation."""

    stats: TensorStats
    scales: np.ndarray | None = None   # AWQ scales already multiplied into the weight's rows
    _hinv: InverseHessian | None = field(default=None, repr=False)

    def inverse_hessian(self, name: str) -> InverseHessian:
        """Cached: the linears sharing this input share it."""
        if self._hinv is None:
            st = self.stats
            self._hinv = inverse_hessian(st.gram, st.n_rows, gptq_damp(st.n_rows, st.k), name)
        return self._hinv

    def release(self) -> None:
        self._hinv = None


def awq(w, fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str = "weight", stats=None):
    """Quantize the weight (its rows already multiplied by the AWQ scales) with the output-error clip search."""
    calib = _need(stats, name)
    codec = codec_for(fmt, group_size, asymmetric, act_dtype, clip_ratios, name)
    scales = calib.scales if calib.scales is not None else np.ones(calib.stats.k, np.float32)
    return awq_mod.quantize_scaled(np.asarray(w, np.float32), calib.stats, scales, codec)


def gptq(w, fmt, group_size: int, asymmetric: bool, act_dtype: str, clip_ratios, name: str = "weight", stats=None):
    calib = _need(stats, name)
    # Every other clip ratio: the group search is most of GPTQ's time, and the error feedback makes the finer grid
    # useless (all-MiniLM-L6-v2 INT4 g128: 0.98256 mean cosine with 10 ratios, 0.98254 with 19; 0.9757 with 1).
    codec = codec_for(fmt, group_size, asymmetric, act_dtype, tuple(clip_ratios)[::2], name)
    return gptq_quantize(w, calib.inverse_hessian(name), codec, name=name)


def _need(stats, name: str) -> InputCalibration:
    if not isinstance(stats, InputCalibration):
        raise QuantizationError(f"{name}: no calibration statistics for its input")
    if stats.stats.n_rows == 0:
        raise QuantizationError(f"{name}: the calibration data never reached this node")
    return stats


# ---------------------------------------------------------------------------------------------------- pipeline
def load_feeds(model, config) -> list[dict[str, np.ndarray]]:
    """The calibration samples of ``config`` (--calib-data / --calib-script, capped by --calib-samples)."""
    from graph_passes.feeds import load_npz_feeds, load_script_feeds, model_input_specs

    if config.calib_data and config.calib_script:
        raise UserError("give either --calib-data or --calib-script, not both")
    if not (config.calib_data or config.calib_script):
        raise UserError(f"--method {config.method} needs calibration data: --calib-data FILE.npz or "
                        f"--calib-script FILE.py[:FUNC]")
    specs = model_input_specs(model)
    if config.calib_data:
        return load_npz_feeds(config.calib_data, specs, config.calib_samples)
    return load_script_feeds(config.calib_script, specs, config.calib_samples)


@dataclass
class Calibration:
    method: str
    data: CalibrationData
    inputs: dict[str, InputCalibration]        # by activation tensor name (also the names AWQ gives scaled inputs)
    folds: list[tuple[Fold, float]] = field(default_factory=list)   # AWQ: (edit, alpha)

    def for_tensor(self, name: str) -> InputCalibration | None:
        return self.inputs.get(name)

    def prepare(self, graph, config, report) -> None:
        """AWQ's graph edit (nothing for GPTQ): scales per activation, weights scaled, 1/s folded or multiplied."""
        if self.method != "awq":
            return
        from graph_passes.passes._common import NameScope
        from graph_passes.passes.match import find_linear_layers

        matches, _ = find_linear_layers(graph, config)
        groups: dict[str, list] = {}
        for m in matches:
            if m.x.name in self.inputs:
                groups.setdefault(m.x.name, []).append(m)
        names = NameScope(graph)
        for x_name, ms in groups.items():
            calib = self.inputs[x_name]
            if calib.stats.n_rows == 0:
                continue
            fmt = config.weight_format
            codec = codec_for(fmt, config.group_size, config.asymmetric, config.act_dtype, config.clip_ratios,
                              ms[0].node.name)
            weights = [m.load_weight(config.external_data_dir) for m in ms]
            found = awq_mod.search_scales(weights, calib.stats, codec)
            if found.identity:
                continue
            for m, w in zip(ms, weights):
                _set_weight(m, w * found.scales[:, None], names)
            del weights
            fold = fold_input_scale(graph, ms[0].x, [m.node for m in ms], found.scales, names)
            calib.scales = found.scales
            self.inputs[ms[0].node.inputs[0].name] = calib
            self.folds.append((fold, found.alpha))
        graph.cleanup()
        for fold, alpha in self.folds:
            report.notes.append(f"awq: {fold.describe()} (alpha {alpha:.2f})")

    def summary(self) -> str:
        d = self.data
        return (f"calibration: {d.samples} sample(s), {d.tokens} token(s) per linear input"
                + (f", {d.passes} passes" if d.passes > 1 else "") + f", method {self.method}")


def _set_weight(match, w: np.ndarray, names) -> None:
    """Point the linear at a new constant holding ``w`` [K, N] (in the graph's dtype, Gemm's orientation)."""
    import onnx_graphsurgeon as gs

    values = w.T if match.node.op == "Gemm" and match.transpose else w
    const = gs.Constant(names(f"{match.source_name}_awq"), np.ascontiguousarray(values.astype(match.dtype)))
    match.node.inputs[1] = const
    if match.node.op == "Gemm":
        match.node.attrs["alpha"] = 1.0  # load_weight included alpha


def calibrate(model, config, *, base_dir: str | None, report) -> Calibration:
    """Run the calibration samples through ``model`` (ModelProto, external data on disk) and keep the statistics of
    every quantizable linear's input."""
    import onnx_graphsurgeon as gs

    from graph_passes.passes.match import find_linear_layers

    feeds = load_feeds(model, config)
    matches, _ = find_linear_layers(gs.import_onnx(model), config)
    tensors = {m.x.name: m.k for m in matches}
    if not tensors:
        return Calibration(config.method, CalibrationData({}, len(feeds), 0, 0), {})
    data = collect(model, tensors, feeds, base_dir=base_dir, gram=True,
                   max_rows=collect_rows(config.method), progress=config.progress)
    calibration = Calibration(config.method, data, {n: InputCalibration(s) for n, s in data.stats.items()})
    report.notes.append(calibration.summary())
    return calibration


def collect_rows(method: str) -> int:
    """Rows kept per activation: AWQ's alpha search needs some, GPTQ none."""
    from graph_passes.calibration.collect import DEFAULT_MAX_ROWS

    return DEFAULT_MAX_ROWS if method == "awq" else 0
