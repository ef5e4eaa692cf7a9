"""The ``WeightOnlyLinear`` op contract as code (docs/op.md is its prose), a node builder and a numpy reference.

Node: op_type ``WeightOnlyLinear``, domain ``trt_woq`` (model opset_import ``trt_woq`` version 1).
Inputs, in order; optional ones are present only when their flag says so (never as empty names):
  0 ``X`` [..., K] fp16 / bf16, 1 ``packed_weight`` int32 (layout ``layout``), 2 ``scales`` [K/G, N] (act dtype),
  then ``zeros`` [K/G, N] (act dtype, integer values) if ``has_zeros``, then ``bias`` [N] (act dtype) if ``has_bias``.
Output 0: ``Y`` [..., N] in the activation dtype; ``Y = X @ ((U - Z) * S) + bias`` with FP32 accumulation.

The reference evaluator (:class:`WeightOnlyLinear`, for ``onnx.reference.ReferenceEvaluator(new_ops=[...])``) also
accepts float32 activations (scales, zeros and bias then float32 too). That form is for references only: it lets a
plugin-format model be checked against its Q/DQ twin at float32 precision. The TensorRT plugin takes fp16 / bf16.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from graph_passes.errors import QuantizationError
from graph_passes.layouts import get_layout
from graph_passes.registry.act_modes import ACT_MODES, ActMode
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
OPTIONAL_INPUTS = ("zeros", "bias")  # gated by has_zeros, has_bias

INT_ATTRIBUTES = ("bits", "group_size", "in_features", "out_features", "layout", "has_zeros", "has_bias")
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
        return self

    @property
    def weight_format(self) -> WeightFormat:
        return format_by_bits(self.bits, OP_TYPE)

    @property
    def act_mode(self) -> ActMode:
        """Weight-only: the op has no activation-mode attribute yet."""
        return ACT_MODES.get("weight_only")

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
        for name, flag in zip(OPTIONAL_INPUTS, (self.has_zeros, self.has_bias), strict=True):
            if flag:
                pos[name] = nxt
                nxt += 1
        return pos

    def to_dict(self) -> dict:
        """All node attributes, INT ones and the plugin STRING ones."""
        return {**asdict(self), **STRING_ATTRIBUTES}

    @classmethod
    def from_dict(cls, attrs: dict) -> "WoqAttributes":
        missing = [a for a in INT_ATTRIBUTES if a not in attrs or attrs[a] is None]
        if missing:
            raise QuantizationError(f"{OP_TYPE}: missing attribute(s) {', '.join(missing)}")
        return cls(**{a: int(attrs[a]) for a in INT_ATTRIBUTES})


def make_gs_node(graph, x, packed, scales, zeros, bias, output, attrs: WoqAttributes, name: str):
    """Add a WeightOnlyLinear node to the onnx-graphsurgeon ``graph``; ``zeros`` / ``bias`` may be None."""
    attrs.validate(name)
    if bool(zeros is not None) != bool(attrs.has_zeros) or bool(bias is not None) != bool(attrs.has_bias):
        raise QuantizationError(f"{name}: zeros/bias inputs do not match has_zeros={attrs.has_zeros}, "
                                f"has_bias={attrs.has_bias}")
    inputs = [x, packed, scales] + [t for t in (zeros, bias) if t is not None]
    return graph.layer(op=OP_TYPE, name=name, domain=DOMAIN, inputs=inputs, outputs=[output],
                       attrs=attrs.to_dict())


def make_onnx_node(inputs, outputs, attrs: WoqAttributes, name: str = ""):
    """An ``onnx.NodeProto`` for the op (``inputs``: names in contract order, optional ones only when flagged)."""
    import onnx

    attrs.validate(name or OP_TYPE)
    expected = 3 + attrs.has_zeros + attrs.has_bias
    if len(inputs) != expected:
        raise QuantizationError(f"{name or OP_TYPE}: expected {expected} inputs for has_zeros={attrs.has_zeros}, "
                                f"has_bias={attrs.has_bias}, got {len(inputs)}")
    return onnx.helper.make_node(OP_TYPE, list(inputs), list(outputs), name=name, domain=DOMAIN, **attrs.to_dict())


def evaluate(x, packed, scales, zeros, bias, attrs: WoqAttributes) -> np.ndarray:
    """Reference ``Y = X @ ((U - Z) * S) + bias`` from the packed tensors: float64 math, result in X's dtype."""
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
    w = attrs.weight_format.dequantize(np.asarray(packed), scales, zeros, k, n, attrs.group_size)
    y = attrs.act_mode.reference(x.astype(np.float64), attrs.group_size) @ w
    if bias is not None:
        y = y + np.asarray(bias).astype(np.float64)
    return attrs.epilogue.reference(y).astype(act)


def _make_op_run():
    from onnx.reference.op_run import OpRun

    class WeightOnlyLinear(OpRun):
        """``onnx.reference`` implementation of trt_woq::WeightOnlyLinear (see :func:`evaluate`)."""

        op_domain = DOMAIN

        def _run(self, x, packed_weight, scales, *optional, **attributes):
            # OpRun passes every attribute present on the node as a keyword argument.
            attrs = WoqAttributes.from_dict(attributes)
            if len(optional) != attrs.has_zeros + attrs.has_bias:
                raise QuantizationError(f"{OP_TYPE}: got {3 + len(optional)} inputs for has_zeros="
                                        f"{attrs.has_zeros}, has_bias={attrs.has_bias}")
            zeros = optional[0] if attrs.has_zeros else None
            bias = optional[-1] if attrs.has_bias else None
            return (evaluate(x, packed_weight, scales, zeros, bias, attrs),)

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
