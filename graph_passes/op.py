"""The ``WeightOnlyLinear`` op contract as code (docs/op.md is its prose), a node builder and a numpy reference.

Node: op_type ``WeightOnlyLinear``, domain ``trt_woq`` (model opset_import ``trt_woq`` version 1).
Inputs, in order; optional ones are present only when their flag says so (never as empty names):
  0 ``X`` [..., K] fp16 / bf16, 1 ``packed_weight`` int32 (layout ``layout``), 2 ``scales`` [K/G, N] (act dtype),
  then ``zeros`` [K/G, N] (act dtype, integer values) if ``has_zeros``, then ``bias`` [N] (act dtype) if ``has_bias``,
  then ``weight_sums`` [K/G, N] int32 (sums of the signed weight codes per group) if ``act_asymmetric``.
Output 0: ``Y`` [..., N] in the activation dtype; ``Y = epilogue(act_mode(X) @ ((U - Z) * S) + bias)`` with FP32
accumulation. ``act_mode`` (default 0, weight-only) = 1 quantizes X per token to INT8 first (W8A8, docs/op.md);
``activation`` (INT, the epilogue's C enum, 0 = none) names the epilogue and ``clip_min`` / ``clip_max`` (FLOAT, only
with ``clip``) its parameters. ``graph_passes.op_conv`` builds WeightOnlyConv on the same attributes (weight-only).

The reference evaluator (:class:`WeightOnlyLinear`, for ``onnx.reference.ReferenceEvaluator(new_ops=[...])``) also
accepts float32 activations (scales, zeros and bias then float32 too). That form is for references only: it lets a
plugin-format model be checked against its Q/DQ twin at float32 precision. The TensorRT plugin takes fp16 / bf16.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.layouts import get_layout
from graph_passes.quantizers.activations import quantize_activations
from graph_passes.registry.act_modes import ACT_MODES, WEIGHT_ONLY, ActMode
from graph_passes.registry.epilogues import EPILOGUES, Epilogue, epilogue_by_enum
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
# Epilogue attributes: ``activation`` (default 0 = none) always written; the epilogue's float parameters only when
# it has them (``clip_min`` / ``clip_max`` for clip).
ACTIVATION_ATTRIBUTE = "activation"
FLOAT_ATTRIBUTES = tuple(dict.fromkeys(p for e in EPILOGUES for p in e.params))
# Activation-mode attributes a node may omit (absent = weight-only), written only when not the default.
OPTIONAL_INT_ATTRIBUTES = {"act_mode": 0, "act_asymmetric": 0}
STRING_ATTRIBUTES = {"plugin_version": PLUGIN_VERSION, "plugin_namespace": PLUGIN_NAMESPACE}


@dataclass(frozen=True)
class WoqAttributes:
    """The attributes of a WeightOnlyLinear node (the INT ones, the epilogue and its parameters)."""

    op_type: ClassVar[str] = OP_TYPE
    bits: int
    group_size: int
    in_features: int
    out_features: int
    layout: int = 1
    has_zeros: int = 0
    has_bias: int = 0
    activation: int = 0
    clip_min: float = -math.inf
    clip_max: float = math.inf
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
        epilogue_by_enum(self.activation, where)
        if not self.clip_min <= self.clip_max:  # also refuses NaN
            raise QuantizationError(f"{where}: clip_min {self.clip_min} must be <= clip_max {self.clip_max}")
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
        """The epilogue named by ``activation``, applied after the bias."""
        return epilogue_by_enum(self.activation, self.op_type)

    def epilogue_params(self) -> dict[str, float]:
        return {p: getattr(self, p) for p in self.epilogue.params}

    def apply_epilogue(self, y: np.ndarray) -> np.ndarray:
        """The float64 epilogue of this node on ``y`` (float64)."""
        return self.epilogue.reference(y, **self.epilogue_params())

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
        """All node attributes: INT ones, the epilogue's parameters when it has some, the activation-mode ones when
        not weight-only, the plugin STRING ones."""
        d = asdict(self)
        for p in FLOAT_ATTRIBUTES:
            if p not in self.epilogue.params:
                del d[p]
        for a, default in OPTIONAL_INT_ATTRIBUTES.items():
            if d[a] == default:
                del d[a]
        return {**d, **STRING_ATTRIBUTES}

    @classmethod
    def _read(cls, attrs: dict) -> dict:
        """Constructor arguments from node attributes: required INTs, ``activation`` and its float parameters."""
        missing = [a for a in INT_ATTRIBUTES if a not in attrs or attrs[a] is None]
        if missing:
            raise QuantizationError(f"{cls.op_type}: missing attribute(s) {', '.join(missing)}")
        out = {a: int(attrs[a]) for a in INT_ATTRIBUTES}
        out[ACTIVATION_ATTRIBUTE] = int(attrs.get(ACTIVATION_ATTRIBUTE) or 0)
        params = epilogue_by_enum(out[ACTIVATION_ATTRIBUTE], cls.op_type).params
        missing = [p for p in params if attrs.get(p) is None]
        if missing:
            raise QuantizationError(f"{cls.op_type}: activation {out[ACTIVATION_ATTRIBUTE]} needs attribute(s) "
                                    f"{', '.join(missing)}")
        out.update({p: float(attrs[p]) for p in params})
        out.update({a: d if attrs.get(a) is None else int(attrs[a]) for a, d in OPTIONAL_INT_ATTRIBUTES.items()})
        return out

    @classmethod
    def from_dict(cls, attrs: dict) -> "WoqAttributes":
        return cls(**cls._read(attrs))

    def with_epilogue(self, epilogue: Epilogue, **params: float) -> "WoqAttributes":
        """A copy of these attributes with ``epilogue`` (and its parameters) as the activation."""
        from dataclasses import replace

        defaults = {f.name: f.default for f in fields(WoqAttributes) if f.name in FLOAT_ATTRIBUTES}
        return replace(self, activation=epilogue.c_enum, **{**defaults, **params})


def make_gs_node(graph, x, packed, scales, zeros, bias, output, attrs: WoqAttributes, name: str, weight_sums=None):
    """Add a WeightOnlyLinear node (WeightOnlyConv for ``op_conv.ConvAttributes``) to the onnx-graphsurgeon
    ``graph``; ``zeros`` / ``bias`` / ``weight_sums`` may be None."""
    attrs.validate(name)
    optional = (zeros, bias, weight_sums)
    if tuple(int(t is not None) for t in optional) != attrs.optional_flags:
        raise QuantizationError(f"{name}: zeros/bias/weight_sums inputs do not match has_zeros={attrs.has_zeros}, "
                                f"has_bias={attrs.has_bias}, act_asymmetric={attrs.act_asymmetric}")
    inputs = [x, packed, scales] + [t for t in optional if t is not None]
    return graph.layer(op=attrs.op_type, name=name, domain=DOMAIN, inputs=inputs, outputs=[output],
                       attrs=attrs.to_dict())


def make_onnx_node(inputs, outputs, attrs: WoqAttributes, name: str = ""):
    """An ``onnx.NodeProto`` for the op (``inputs``: names in contract order, optional ones only when flagged)."""
    import onnx

    attrs.validate(name or attrs.op_type)
    if len(inputs) != attrs.num_inputs:
        raise QuantizationError(f"{name or attrs.op_type}: expected {attrs.num_inputs} inputs for has_zeros="
                                f"{attrs.has_zeros}, has_bias={attrs.has_bias}, act_asymmetric={attrs.act_asymmetric}, "
                                f"got {len(inputs)}")
    return onnx.helper.make_node(attrs.op_type, list(inputs), list(outputs), name=name, domain=DOMAIN,
                                 **attrs.to_dict())


def check_operands(x: np.ndarray, scales, zeros, bias, attrs: WoqAttributes) -> np.dtype:
    """The activation dtype after checking the dtypes and shapes of scales / zeros / bias against ``attrs``."""
    act = x.dtype
    name = attrs.op_type
    if act != np.float16 and act != np.float32 and act.name != "bfloat16":
        raise QuantizationError(f"{name}: X must be fp16 or bf16 (float32 in the reference only), got {act}")
    n = attrs.out_features
    expected = (attrs.num_groups, n)
    for label, t in (("scales", scales), ("zeros", zeros)):
        if t is None:
            continue
        t = np.asarray(t)
        if t.dtype != act or tuple(t.shape) != expected:
            raise QuantizationError(f"{name}: {label} must be {act} {expected}, got {t.dtype} {tuple(t.shape)}")
    if bias is not None and (np.asarray(bias).dtype != act or tuple(np.shape(bias)) != (n,)):
        raise QuantizationError(f"{name}: bias must be {act} ({n},), got {np.asarray(bias).dtype} "
                                f"{tuple(np.shape(bias))}")
    return act


def product(x64: np.ndarray, packed, scales, zeros, bias, attrs: WoqAttributes, act, weight_sums=None) -> np.ndarray:
    """``epilogue(act_mode(X) @ W + bias)`` of float64 rows ``x64`` [..., K], rounded once to ``act``. W8A8 computes
    the integer GEMM and the offset correction of docs/op.md from ``weight_sums``."""
    if attrs.act_mode_entry() is WEIGHT_ONLY:
        w = attrs.weight_format.dequantize(np.asarray(packed), scales, zeros, attrs.in_features, attrs.out_features,
                                           attrs.group_size)
        y = x64 @ w
    else:
        y = w8a8_evaluate(x64.astype(act), packed, scales, weight_sums, attrs)
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64)
    return attrs.apply_epilogue(y).astype(act)


def evaluate(x, packed, scales, zeros, bias, attrs: WoqAttributes, weight_sums=None) -> np.ndarray:
    """Reference ``Y = epilogue(act_mode(X) @ ((U - Z) * S) + bias)`` from the packed tensors: float64 math, result in
    X's dtype."""
    attrs.validate()
    x = np.asarray(x)
    act = check_operands(x, scales, zeros, bias, attrs)
    k = attrs.in_features
    if x.ndim < 1 or x.shape[-1] != k:
        raise QuantizationError(f"{OP_TYPE}: X of shape {x.shape} does not end in in_features={k}")
    return product(x.astype(np.float64), packed, scales, zeros, bias, attrs, act, weight_sums)


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


def make_op_run(attrs_cls, evaluate_fn):
    """An ``onnx.reference`` OpRun class named ``attrs_cls.op_type`` that runs ``evaluate_fn`` on the node."""
    from onnx.reference.op_run import OpRun

    def _run(self, x, packed_weight, scales, *optional, **attributes):
        # OpRun passes every attribute present on the node as a keyword argument.
        attrs = attrs_cls.from_dict(attributes)
        if 3 + len(optional) != attrs.num_inputs:
            raise QuantizationError(f"{attrs_cls.op_type}: got {3 + len(optional)} inputs, expected "
                                    f"{attrs.num_inputs} for its has_zeros / has_bias / act_asymmetric")
        named = dict(zip([nm for nm, f in zip(OPTIONAL_INPUTS, attrs.optional_flags) if f], optional))
        extra = {"weight_sums": named["weight_sums"]} if "weight_sums" in named else {}
        return (evaluate_fn(x, packed_weight, scales, named.get("zeros"), named.get("bias"), attrs, **extra),)

    doc = f"``onnx.reference`` implementation of {DOMAIN}::{attrs_cls.op_type}."
    return type(attrs_cls.op_type, (OpRun,), {"op_domain": DOMAIN, "_run": _run, "__doc__": doc})


_OP_RUN = None


def reference_op():
    """The OpRun class to pass as ``ReferenceEvaluator(model, new_ops=[reference_op()])`` (onnx imported lazily)."""
    global _OP_RUN
    if _OP_RUN is None:
        _OP_RUN = make_op_run(WoqAttributes, evaluate)
    return _OP_RUN


def reference_evaluator(model, **kwargs):
    """``onnx.reference.ReferenceEvaluator`` that knows WeightOnlyLinear and WeightOnlyConv."""
    from onnx.reference import ReferenceEvaluator

    from graph_passes import op_conv

    return ReferenceEvaluator(model, new_ops=[reference_op(), op_conv.reference_op()], **kwargs)


def __getattr__(name):
    """``graph_passes.op.WeightOnlyLinear``: the OpRun class, created on first use (onnx.reference imported then)."""
    if name == "WeightOnlyLinear":
        return reference_op()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
