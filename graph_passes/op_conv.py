"""The ``WeightOnlyConv`` op contract as code (docs/op.md, "WeightOnlyConv", is its prose) and its numpy reference.

Node: op_type ``WeightOnlyConv``, domain ``trt_woq``; inputs as WeightOnlyLinear (``X``, ``packed_weight``, ``scales``,
then ``zeros`` / ``bias`` when flagged), attributes those of WeightOnlyLinear (``in_features`` = K =
in_channels * kernel_h * kernel_w, ``out_features`` = N = output channels, ``activation`` ...) plus the geometry:
``in_channels`` (INT), ``kernel_shape`` [kh, kw], ``strides`` [sh, sw], ``pads`` [top, left, bottom, right] (ONNX
order, explicit: ``auto_pad`` is resolved by the pass), ``dilations`` [dh, dw] (INTS), ``k_order`` (INT, optional,
default 0). Group 1 only.

``X`` is NCHW [B, C, H, W]; ``Y`` is NCHW [B, N, OH, OW] with ``OH = (H + top + bottom - dh (kh - 1) - 1) // sh + 1``.
The packed weight is the implicit-GEMM matrix ``W[K, N]`` in the linear layout; row ``k`` of it is, for input
channel ``c`` and kernel tap ``(i, j)``, ``k = (c * kh + i) * kw + j`` with ``k_order`` 0 (the ONNX weight
``[N, C, kh, kw]`` reshaped to ``[N, K]`` and transposed) or ``k = (i * kw + j) * C + c`` with ``k_order`` 1 (the
weight transposed to ``[N, kh, kw, C]`` first: one tap's channels are contiguous, as in a channels-last activation),
so ``Y[b, n, y, x] = epilogue(sum_k patch[b, y, x, k] * W[k, n] + bias[n])`` with
``patch[b, y, x, k(c, i, j)] = X[b, c, y sh - top + i dh, x sw - left + j dw]`` (0 outside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from graph_passes import op
from graph_passes.errors import QuantizationError

OP_TYPE = "WeightOnlyConv"
INTS_ATTRIBUTES = {"kernel_shape": 2, "strides": 2, "pads": 4, "dilations": 2}  # name -> length
K_ORDER_CIJ, K_ORDER_IJC = 0, 1  # the ``k_order`` attribute: kernels.h's trt_woq_conv_k_order
K_ORDERS = {K_ORDER_CIJ: "(c, i, j)", K_ORDER_IJC: "(i, j, c)"}


@dataclass(frozen=True)
class ConvAttributes(op.WoqAttributes):
    """The attributes of a WeightOnlyConv node: those of WeightOnlyLinear plus the 2-D geometry."""

    op_type: ClassVar[str] = OP_TYPE
    in_channels: int = 0
    kernel_shape: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    k_order: int = K_ORDER_CIJ

    def validate(self, where: str = OP_TYPE) -> "ConvAttributes":
        super().validate(where)
        if self.act_mode != 0:
            raise QuantizationError(f"{where}: {OP_TYPE} is weight-only (act_mode 0), got act_mode {self.act_mode}")
        for name, length in INTS_ATTRIBUTES.items():
            v = tuple(getattr(self, name))
            if len(v) != length or any(int(d) != d for d in v):
                raise QuantizationError(f"{where}: {name} must be {length} integers, got {list(v)}")
        kh, kw = self.kernel_shape
        if min(self.kernel_shape + self.strides + self.dilations) < 1 or min(self.pads) < 0:
            raise QuantizationError(f"{where}: kernel_shape / strides / dilations must be >= 1 and pads >= 0, got "
                                    f"{list(self.kernel_shape)} / {list(self.strides)} / {list(self.dilations)} / "
                                    f"{list(self.pads)}")
        if self.k_order not in K_ORDERS:
            raise QuantizationError(f"{where}: k_order must be one of "
                                    f"{', '.join(f'{v} {o}' for v, o in K_ORDERS.items())}, got {self.k_order}")
        if self.in_channels < 1 or self.in_channels * kh * kw != self.in_features:
            raise QuantizationError(f"{where}: in_features {self.in_features} must equal in_channels "
                                    f"{self.in_channels} x kernel {kh} x {kw}")
        return self

    def output_hw(self, h: int, w: int) -> tuple[int, int]:
        """(OH, OW) for an input of H x W; QuantizationError when the kernel does not fit."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel_shape, self.strides, self.dilations
        top, left, bottom, right = self.pads
        oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
        ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
        if oh < 1 or ow < 1:
            raise QuantizationError(f"{OP_TYPE}: input {h} x {w} is smaller than the dilated kernel")
        return oh, ow

    def to_dict(self) -> dict:
        d = super().to_dict()
        if d["k_order"] == K_ORDER_CIJ:  # the default: files of the (c, i, j) order read the same with or without it
            del d["k_order"]
        return {**d, **{name: [int(v) for v in d[name]] for name in INTS_ATTRIBUTES}}

    @classmethod
    def from_dict(cls, attrs: dict) -> "ConvAttributes":
        missing = [a for a in ("in_channels", *INTS_ATTRIBUTES) if attrs.get(a) is None]
        if missing:
            raise QuantizationError(f"{OP_TYPE}: missing attribute(s) {', '.join(missing)}")
        geometry = {name: tuple(int(v) for v in attrs[name]) for name in INTS_ATTRIBUTES}
        k_order = attrs.get("k_order")
        return cls(**cls._read(attrs), in_channels=int(attrs["in_channels"]), **geometry,
                   k_order=K_ORDER_CIJ if k_order is None else int(k_order))

    def onnx_view(self) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int] | None]:
        """How ``W^T [N, K]`` becomes the ONNX weight ``[N, C, kh, kw]``: the Reshape's shape, then the Transpose's
        permutation (None for K order (c, i, j))."""
        (kh, kw), n, c = self.kernel_shape, self.out_features, self.in_channels
        if self.k_order == K_ORDER_IJC:
            return (n, kh, kw, c), (0, 3, 1, 2)
        return (n, c, kh, kw), None


def matrix_of(w4: np.ndarray, k_order: int) -> np.ndarray:
    """The implicit-GEMM ``W[K, N]`` of an ONNX conv weight ``[N, C, kh, kw]`` in ``k_order``."""
    n = w4.shape[0]
    w = w4.transpose(0, 2, 3, 1) if k_order == K_ORDER_IJC else w4
    return np.ascontiguousarray(w.reshape(n, -1).T)


def onnx_weight(w_kn: np.ndarray, attrs: ConvAttributes) -> np.ndarray:
    """The ONNX conv weight ``[N, C, kh, kw]`` of the implicit-GEMM ``W[K, N]`` (inverse of ``matrix_of``)."""
    shape, perm = attrs.onnx_view()
    w = w_kn.T.reshape(shape)
    return np.ascontiguousarray(w if perm is None else w.transpose(perm))


def im2col(x64: np.ndarray, attrs: ConvAttributes) -> np.ndarray:
    """Patches of NCHW ``x64`` as rows ``[B, OH, OW, K]`` in ``attrs.k_order`` (module docstring; zeros outside)."""
    b, c, h, w = x64.shape
    oh, ow = attrs.output_hw(h, w)
    (kh, kw), (sh, sw), (dh, dw) = attrs.kernel_shape, attrs.strides, attrs.dilations
    top, left, bottom, right = attrs.pads
    xp = np.pad(x64, ((0, 0), (0, 0), (top, bottom), (left, right)))
    taps = [xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            for i in range(kh) for j in range(kw)]
    cols = np.stack(taps, axis=2).reshape(b, c, kh, kw, oh, ow)
    order = (0, 4, 5, 2, 3, 1) if attrs.k_order == K_ORDER_IJC else (0, 4, 5, 1, 2, 3)
    return cols.transpose(order).reshape(b, oh, ow, c * kh * kw)


def evaluate(x, packed, scales, zeros, bias, attrs: ConvAttributes) -> np.ndarray:
    """Reference NCHW ``Y = epilogue(conv(X, W) + bias)`` from the packed tensors: float64 math, X's dtype."""
    attrs.validate()
    x = np.asarray(x)
    act = op.check_operands(x, scales, zeros, bias, attrs)
    if x.ndim != 4 or x.shape[1] != attrs.in_channels:
        raise QuantizationError(f"{OP_TYPE}: X of shape {x.shape} is not NCHW with C = in_channels "
                                f"{attrs.in_channels}")
    y = op.product(im2col(x.astype(np.float64), attrs), packed, scales, zeros, bias, attrs, act)
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2))


_OP_RUN = None


def reference_op():
    """The ``onnx.reference`` OpRun class of WeightOnlyConv (onnx imported lazily)."""
    global _OP_RUN
    if _OP_RUN is None:
        _OP_RUN = op.make_op_run(ConvAttributes, evaluate)
    return _OP_RUN


__all__ = ["K_ORDERS", "K_ORDER_CIJ", "K_ORDER_IJC", "OP_TYPE", "ConvAttributes", "evaluate", "im2col",
           "matrix_of", "onnx_weight", "reference_op"]
