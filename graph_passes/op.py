"""The ``WeightOnlyLinear`` op contract as code (docs/op.md is its prose), a node builder and a numpy reference.

Node: op_type ``WeightOnlyLinear``, domain ``trt_woq`` (model opset_import ``trt_woq`` version 1).
Inputs, in order; optional ones are present only when their flag says so (never as empty names):
  0 ``X`` [..., K] fp16 / bf16, 1 ``packed_weight`` int32 (layout ``layout``), 2 ``scales`` [K/G, N] (act dtype),
  then ``zeros`` [K/G, N] (act dtype, integer values) if ``has_zeros``, then ``bias`` [N] (act dtype) if ``has_bias``,
  then ``weight_sums`` [K/G, N] int32 (sums of the signed weight codes per group) if ``act_asymmetric``.
Output 0: ``Y`` [..., N] in the activation dtype; ``Y = X @ ((U - Z) * S) + bias`` with FP32 accumulation.
Attribute ``act_mode`` (default 0, weight-only) = 1 quantizes X per token to INT8 first (W8A8, docs/op.md).

The reference evaluator (:class:`WeightOnlyLinear`, for ``onnx.reference.ReferenceEvaluator(new_ops=[...])``) also
accepts float32 activations (scales, zeros and bias then float32 too). That form is for references only: it lets a
plugin-format model be checked against its Q/DQ twin at float32 precision. The TensorRT plugin takes fp16 / bf16.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.layouts import get_layout
from graph_passes.quantizers.activations import quantize_activations
from graph_passes.registry.act_modes import ACT_MODES, WEIGHT_ONLY, ActMode
from graph_passes.registry.epilogues import EPILOGUES, Epilogue
from graph_passes.registry.formats import WeightFormat, format_by_bits

OP_TYPE = "WeightOnlyLinear"
DOMAIN = "trt_woq"
OPSET_VERSION = 1
PLUGIN_VERSION = "1"
PLUGIN_NAMESPACE = ""

# Fixed input positions; the optional ones follow in this order when present.
INPUT_X = 0
INPUT_PACKED_WEIGHT = 1
INPUT_SCALES = 2
OPTIONAL_INPUTS = ("zeros", "bias", "weight_sums")  # gated by has_zeros, has_bias, act_asymmetric

INT_ATTRIBUTES = ("bits", "group_size", "in_features", "out_features", "layout", "has_zeros", "has_bias")
# Attributes a node may omit (models written before them): name -> default.
OPTIONAL_INT_ATTRIBUTES = {"act_mode": 0, "act_asymmetric": 0}
STRING_ATTRIBUTES = {"plugin_version": PLUGIN_VERSION, "plugin_namespace": PLUGIN_NAMESPACE}


@dataclass(frozen=True)
class WoqAttributes:
    """The INT attributes of a WeightOnlyLinear node."""

    bits: int
    group_size: int
    in_features: int
    out_features: int
    layout: int = 1
    has_zeros: int = 0
    has_bias: int = 0
    act_mode: int = 0        # C enum value of the activation mode (graph_passes.registry.act_modes)
    act_asymmetric: int = 0  # W8A8: activations quantized with an offset per row block; weight_sums input present

    def validate(self, where: str = OP_TYPE) -> "WoqAttributes":
        """Raise QuantizationError quoting the bad value; returns self so calls chain."""
        fmt = format_by_bits(self.bits, where)
        fmt.check_group_size(self.group_size, where)
        if self.group_size != -1 and self.in_features % self.group_size:
            raise QuantizationError(f"{where}: in_features {self.in_features} is not a multiple of group_size "
                                    f"{self.group_size}")
        if self.has_zeros not in (0, 1) or self.has_bias not in (0, 1):
            raise QuantizationError(f"{where}: has_zeros / has_bias must be 0 or 1, got {self.has_zeros} / "
                                    f"{self.has_bias}")
        if get_layout(self.layout) is not fmt.layout:
            raise QuantizationError(f"{where}: {fmt.label} is packed in layout {fmt.layout.VERSION}, not {self.layout}")
        fmt.check_shape(self.in_features, self.out_features)
        mode = self.act_mode_entry(where)
        if mode.weight_bits and self.bits not in mode.weight_bits:
            raise QuantizationError(f"{where}: activation mode {mode.name} takes {'/'.join(map(str, mode.weight_bits))}"
                                    f"-bit weights, not {self.bits}")
        if mode is not WEIGHT_ONLY and self.has_zeros:
            raise QuantizationError(f"{where}: activation mode {mode.name} takes symmetric weights (has_zeros = 0)")
        if self.act_asymmetric not in (0, 1) or (self.act_asymmetric and mode is WEIGHT_ONLY):
            raise QuantizationError(f"{where}: act_asymmetric must be 0, or 1 with a quantized activation mode; got "
                                    f"{self.act_asymmetric} with {mode.name}")
        return self

    def act_mode_entry(self, where: str = OP_TYPE) -> ActMode:
        for mode in ACT_MODES:
            if mode.c_enum == self.act_mode:
                return mode
        raise QuantizationError(f"{where}: act_mode {self.act_mode} is not one of "
                                f"{', '.join(f'{m.c_enum} ({m.name})' for m in ACT_MODES)}")

    @property
    def weight_format(self) -> WeightFormat:
        return format_by_bits(self.bits, OP_TYPE)

    @property
    def epilogue(self) -> Epilogue:
        """None: the op has no epilogue attribute yet (the bias input is added before any epilogue)."""
        return EPILOGUES.get("none")

    @property
    def num_groups(self) -> int:
        return 1 if self.group_size == -1 else self.in_features // self.group_size

    def input_positions(self) -> dict[str, int]:
        """Input name -> position for this node's flags."""
        pos = {"X": INPUT_X, "packed_weight": INPUT_PACKED_WEIGHT, "scales": INPUT_SCALES}
        nxt = INPUT_SCALES + 1
        for name, flag in zip(OPTIONAL_INPUTS, self.optional_flags, strict=True):
            if flag:
                pos[name] = nxt
                nxt += 1
        return pos

    @property
    def optional_flags(self) -> tuple[int, int, int]:
        """The flags of OPTIONAL_INPUTS, in order."""
        return self.has_zeros, self.has_bias, self.act_asymmetric

    @property
    def num_inputs(self) -> int:
        return 3 + sum(self.optional_flags)

    def to_dict(self) -> dict:
        """All node attributes, INT ones and the plugin STRING ones."""
        return {**asdict(self), **STRING_ATTRIBUTES}

    @classmethod
    def from_dict(cls, attrs: dict) -> "WoqAttributes":
        missing = [a for a in INT_ATTRIBUTES if a not in attrs or attrs[a] is None]
        if missing:
            raise QuantizationError(f"{OP_TYPE}: missing attribute(s) {', '.join(missing)}")
        values = {a: int(attrs[a]) for a in INT_ATTRIBUTES}
        values.update({a: d if attrs.get(a) is None else int(attrs[a]) for a, d in OPTIONAL_INT_ATTRIBUTES.items()})
        return cls(**values)


def make_gs_node(graph, x, packed, scales, zeros, bias, output, attrs: WoqAttributes, name: str, weight_sums=None):
    """Add a WeightOnlyLinear node to the onnx-graphsurgeon ``graph``; ``zeros`` / ``bias`` / ``weight_sums`` may be
    None."""
    attrs.validate(name)
    optional = (zeros, bias, weight_sums)
    if tuple(int(t is not None) for t in optional) != attrs.optional_flags:
        raise QuantizationError(f"{name}: zeros/bias/weight_sums inputs do not match has_zeros={attrs.has_zeros}, "
                                f"has_bias={attrs.has_bias}, act_asymmetric={attrs.act_asymmetric}")
    inputs = [x, packed, scales] + [t for t in optional if t is not None]
    return graph.layer(op=OP_TYPE, name=name, domain=DOMAIN, inputs=inputs, outputs=[output],
                       attrs=attrs.to_dict())


def make_onnx_node(inputs, outputs, attrs: WoqAttributes, name: str = ""):
    """An ``onnx.NodeProto`` for the op (``inputs``: names in contract order, optional ones only when flagged)."""
    import onnx

    attrs.validate(name or OP_TYPE)
    if len(inputs) != attrs.num_inputs:
        raise QuantizationError(f"{name or OP_TYPE}: expected {attrs.num_inputs} inputs for has_zeros="
                                f"{attrs.has_zeros}, has_bias={attrs.has_bias}, act_asymmetric={attrs.act_asymmetric}, "
                                f"got {len(inputs)}")
    return onnx.helper.make_node(OP_TYPE, list(inputs), list(outputs), name=name, domain=DOMAIN, **attrs.to_dict())


def evaluate(x, packed, scales, zeros, bias, attrs: WoqAttributes, weight_sums=None) -> np.ndarray:
    """Reference ``Y = act_mode(X) @ ((U - Z) * S) + bias`` from the packed tensors: float64 math, result in X's
    dtype. W8A8 computes the integer GEMM and the offset correction of docs/op.md from ``weight_sums``."""
    attrs.validate()
    x = np.asarray(x)
    act = x.dtype
    if act != np.float16 and act != np.float32 and act.name != "bfloat16":
        raise QuantizationError(f"{OP_TYPE}: X must be fp16 or bf16 (float32 in the reference only), got {act}")
    k, n = attrs.in_features, attrs.out_features
    if x.ndim < 1 or x.shape[-1] != k:
        raise QuantizationError(f"{OP_TYPE}: X of shape {x.shape} does not end in in_features={k}")
    expected = (attrs.num_groups, n)
    for label, t in (("scales", scales), ("zeros", zeros)):
        if t is None:
            continue
        t = np.asarray(t)
        if t.dtype != act or tuple(t.shape) != expected:
            raise QuantizationError(f"{OP_TYPE}: {label} must be {act} {expected}, got {t.dtype} {tuple(t.shape)}")
    if bias is not None and (np.asarray(bias).dtype != act or tuple(np.shape(bias)) != (n,)):
        raise QuantizationError(f"{OP_TYPE}: bias must be {act} ({n},), got {np.asarray(bias).dtype} "
                                f"{tuple(np.shape(bias))}")
    if attrs.act_mode_entry() is WEIGHT_ONLY:
        w = attrs.weight_format.dequantize(np.asarray(packed), scales, zeros, k, n, attrs.group_size)
        y = x.astype(np.float64) @ w
    else:
        y = w8a8_evaluate(x, packed, scales, weight_sums, attrs)
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64)
    return attrs.epilogue.reference(y).astype(act)


def w8a8_evaluate(x, packed, scales, weight_sums, attrs: WoqAttributes) -> np.ndarray:
    """float64 ``sum_g s_a (C_g s_w + sum(a) o_w) + o_a (sum(w_q) s_w + K_g o_w)`` with ``o_w = 0`` (symmetric
    weights): ``C_g`` the exact integer product of the activation and weight codes of K group ``g``."""
    k, n = attrs.in_features, attrs.out_features
    qa = quantize_activations(x, attrs.group_size, bool(attrs.act_asymmetric))
    # integer codes held in float64: every product and partial sum is an integer below 2^53, so BLAS is exact
    wq = attrs.weight_format.unpack(np.asarray(packed), k, n).astype(np.float64) - (1 << (attrs.bits - 1))
    groups, b = attrs.num_groups, qa.block
    s_w = np.asarray(scales).astype(np.float64).reshape(groups, n)
    a = qa.codes.reshape(-1, groups, b).astype(np.float64)
    s_a = qa.scales.reshape(-1, groups).astype(np.float64)
    y = np.zeros((a.shape[0], n))
    for g in range(groups):
        c = a[:, g] @ wq[g * b:(g + 1) * b]  # C_g, exact
        y += s_a[:, g:g + 1] * (c * s_w[g])
    if attrs.act_asymmetric:
        ws = np.asarray(weight_sums)
        if ws.dtype != np.int32 or ws.shape != (groups, n):
            raise QuantizationError(f"{OP_TYPE}: weight_sums must be int32 {(groups, n)}, got {ws.dtype} "
                                    f"{ws.shape}")
        o_a = qa.offsets.reshape(-1, groups).astype(np.float64)
        y += o_a @ (ws.astype(np.float64) * s_w)
    return y.reshape(*x.shape[:-1], n)


def weight_sums_of(u: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """int32 ``[K/G, N]``: per group, the sum of the signed weight codes ``U - 2^(bits-1)``."""
    k, n = u.shape
    g = k if group_size == -1 else group_size
    q = u.astype(np.int64) - (1 << (bits - 1))
    return q.reshape(k // g, g, n).sum(axis=1).astype(np.int32)


def _make_op_run():
    from onnx.reference.op_run import OpRun

    class WeightOnlyLinear(OpRun):
        """``onnx.reference`` implementation of trt_woq::WeightOnlyLinear (see :func:`evaluate`)."""

        op_domain = DOMAIN

        def _run(self, x, packed_weight, scales, *optional, **attributes):
            # OpRun passes every attribute present on the node as a keyword argument.
            attrs = WoqAttributes.from_dict(attributes)
            if 3 + len(optional) != attrs.num_inputs:
                raise QuantizationError(f"{OP_TYPE}: got {3 + len(optional)} inputs, expected {attrs.num_inputs} "
                                        f"for its has_zeros / has_bias / act_asymmetric")
            named = dict(zip([nm for nm, f in zip(OPTIONAL_INPUTS, attrs.optional_flags) if f], optional))
            return (evaluate(x, packed_weight, scales, named.get("zeros"), named.get("bias"), attrs,
                             named.get("weight_sums")),)

    return WeightOnlyLinear


_OP_RUN = None


def reference_op():
    """The OpRun class to pass as ``ReferenceEvaluator(model, new_ops=[reference_op()])`` (onnx imported lazily)."""
    global _OP_RUN
    if _OP_RUN is None:
        _OP_RUN = _make_op_run()
    return _OP_RUN


def reference_evaluator(model, **kwargs):
    """``onnx.reference.ReferenceEvaluator`` that knows WeightOnlyLinear."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model, new_ops=[reference_op()], **kwargs)


def __getattr__(name):
    """``graph_passes.op.WeightOnlyLinear``: the OpRun class, created on first use (onnx.reference imported then)."""
    if name == "WeightOnlyLinear":
        return reference_op()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
