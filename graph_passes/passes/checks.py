"""Checks that keep a quantized node from silently computing something else than the original.

* Weights the activation dtype cannot hold: in an FP32 graph the op computes in fp16 / bf16, so a weight whose values
  (or group scales) fall below that dtype's normal range is flushed towards zero, and one whose values come near its
  largest finite value overflows the products ``x * w``. Such a node stays float, with the reason and a hint.
* A quantization error far outside the normal range for the format (relative RMS error of the weight above
  :data:`MAX_REL_ERROR`): the weight is not one RTN represents (a few huge outliers, values below the scale's
  resolution); the node stays float.
* Overridable weights: an initializer that is also a graph input may be replaced by the caller at run time, so its
  values are not the weight's; it stays float and stays a graph input (:func:`keep_overridable_inputs`).

The checks raise :class:`WeightCheckError` (a QuantizationError carrying a groupable ``reason``), which the passes
report as a skip. numpy's floating-point warnings are silenced where values are judged: the verdict is the report.
"""

from __future__ import annotations

import numpy as np

from graph_passes.errors import QuantizationError

# Relative RMS error ||W - dequant(W)|| / ||W|| above which a weight is refused, by bit width. On the sample
# (samples/llama) RTN gives at most 0.008 (INT8 per channel), 0.05 (FP6 per channel) and 0.11 (INT4 per channel);
# these bounds are 12x, 4x and 4.5x that, so only weights that RTN cannot represent (values below the scale's
# resolution, outliers that swallow their group) reach them.
MAX_REL_ERROR = {8: 0.1, 6: 0.2, 4: 0.5}
# Largest |w| accepted, as a fraction of the activation dtype's largest finite value: leaves the products x * w
# (|x| up to 64) and their sums room before they overflow.
OVERFLOW_HEADROOM = 64.0
_HINT_FP16 = "use --act-dtype bf16 (the range of float32) or --exclude the node"
_HINT_OTHER = "--exclude the node"


def by_bits(table: dict, bits: int):
    """``table``'s entry for ``bits``, else the one of the nearest smaller width (the least strict of those known)."""
    known = [b for b in table if b <= bits]
    return table[max(known) if known else min(table)]


class WeightCheckError(QuantizationError):
    """A weight the node cannot be quantized with; ``reason`` is short and groupable, the message has the numbers."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _finfo(act_dtype: str):
    """finfo of the op's dtype (bf16 through ml_dtypes, whose finfo numpy's does not know)."""
    if act_dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.finfo(ml_dtypes.bfloat16)
    return np.finfo(np.float16 if act_dtype == "fp16" else np.float32)


def check_largest(w: np.ndarray, act_dtype: str, cast: bool, name: str) -> None:
    """Refuse a weight whose largest values the op's dtype cannot hold (``cast`` as in :func:`check_range`); checked
    before quantizing, where a group scale that overflows the dtype would otherwise stop the quantizer first."""
    if not cast or act_dtype == "fp32":
        return
    info = _finfo(act_dtype)
    with np.errstate(all="ignore"):
        amax = float(np.abs(np.asarray(w, np.float32)).max()) if np.size(w) else 0.0
    if amax > float(info.max) / OVERFLOW_HEADROOM:
        raise WeightCheckError(f"weight too large for {act_dtype}",
                               f"{name}: max |w| = {amax:.3g} is within {OVERFLOW_HEADROOM:g}x of {act_dtype}'s "
                               f"largest value {float(info.max):.3g}; "
                               f"{_HINT_FP16 if act_dtype == 'fp16' else _HINT_OTHER}")


def check_range(w: np.ndarray, qw, act_dtype: str, cast: bool, name: str) -> None:
    """Refuse a weight whose group scales underflow the op's dtype (its largest values: :func:`check_largest`);
    ``cast``: the graph is FP32 and the op computes in ``act_dtype`` (an FP16 / BF16 graph holds its weights in that
    dtype already)."""
    if not cast or act_dtype == "fp32":
        return
    info = _finfo(act_dtype)
    hint = _HINT_FP16 if act_dtype == "fp16" else _HINT_OTHER
    with np.errstate(all="ignore"):
        a = np.abs(np.asarray(w, np.float32))
        amax = float(a.max()) if a.size else 0.0
        k, n = a.shape
        g = k if qw.group_size == -1 else qw.group_size
        group_max = a.reshape(k // g, g, n).max(axis=1)
        group_max = group_max[group_max > 0]
        # A group's scale is about max / 2^(bits-1); below half the smallest subnormal it rounds to zero.
        lost = float(np.count_nonzero(group_max / (1 << (qw.bits - 1)) < float(info.smallest_subnormal) / 2))
    if group_max.size and lost / group_max.size > 0.5:
        raise WeightCheckError(f"weight too small for {act_dtype}",
                               f"{name}: the scales of {lost / group_max.size:.0%} of the groups underflow to zero in "
                               f"{act_dtype} (max |w| = {amax:.3g}); {hint}")


def check_error(qw, act_dtype: str, name: str) -> None:
    """Refuse a quantized weight whose relative RMS error is not finite or far above :data:`MAX_REL_ERROR`."""
    with np.errstate(all="ignore"):
        rel = qw.rel_error
        scales_ok = bool(np.isfinite(qw.scales).all())
    hint = _HINT_FP16 if act_dtype == "fp16" else _HINT_OTHER
    if not (np.isfinite(rel) and scales_ok):
        raise WeightCheckError(f"weight too large for {act_dtype}",
                               f"{name}: the quantization error overflows; {hint}")
    limit = by_bits(MAX_REL_ERROR, qw.bits)
    if rel > limit:
        tries = ("--bits 8, " if qw.bits == 4 else "") + ("a smaller --group-size, " if qw.group_size != 32 else "")
        raise WeightCheckError(f"quantization error far above the normal for INT{qw.bits}",
                               f"{name}: relative RMS error {rel:.3g} > {limit:g} (RTN does not represent this "
                               f"weight); try {tries}or --exclude the node")


def quantize_checked(quantize, w: np.ndarray, act_dtype: str, cast: bool, name: str):
    """``quantize()`` (the RTN call) between the checks; numpy's warnings silenced (the checks judge)."""
    check_largest(w, act_dtype, cast, name)
    with np.errstate(all="ignore"):
        qw = quantize()
    check_range(w, qw, act_dtype, cast, name)
    check_error(qw, act_dtype, name)
    return qw


def overridable_initializers(model) -> set[str]:
    """Names of the initializers that are also graph inputs of ``model`` (an onnx.ModelProto). None before IR version
    4, which lists every initializer as an input: there they are constants (as ONNX Runtime treats them)."""
    if model.ir_version < 4:
        return set()
    return {i.name for i in model.graph.input} & {t.name for t in model.graph.initializer}


def keep_overridable_inputs(model, graph) -> None:
    """onnx-graphsurgeon drops initializers from a graph's inputs on import: put them back into ``graph.inputs``,
    so that the rewritten model keeps its interface and the finder sees them. A weight read only inside an If / Loop /
    Scan body is not among the main graph's own tensors: the bodies are searched too (main graph first)."""
    from graph_passes.passes.match import scoped_graphs

    tensors = {}
    for sub, _ in scoped_graphs(graph):
        for name, tensor in sub.tensors().items():
            tensors.setdefault(name, tensor)
    graph.inputs.extend(tensors[n] for n in sorted(overridable_initializers(model)) if n in tensors)
    order = {i.name: pos for pos, i in enumerate(model.graph.input)}  # positional callers see the same interface
    graph.inputs.sort(key=lambda t: order.get(t.name, len(order)))
