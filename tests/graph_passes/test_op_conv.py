"""The WeightOnlyConv contract and its reference, on packed tensors, vs a direct float64 convolution."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from graph_passes import QuantizationError, op_conv
from graph_passes.layouts import interleaved_v1
from graph_passes.quantize import quantize_rtn, to_act_storage
from graph_passes.registry.epilogues import EPILOGUES


def direct_conv(x, w, bias, strides, pads, dilations):
    """float64 NCHW convolution by its definition (loops over output pixels), weight [OC, IC, kh, kw]."""
    b, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    top, left, bottom, right = pads
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((b, oc, oh, ow))
    for oy in range(oh):
        for ox in range(ow):
            acc = np.zeros((b, oc))
            for i in range(kh):
                for j in range(kw):
                    iy, ix = oy * sh - top + i * dh, ox * sw - left + j * dw
                    if 0 <= iy < h and 0 <= ix < wd:
                        acc += x[:, :, iy, ix] @ w[:, :, i, j].T
            y[:, :, oy, ox] = acc
    return y + (0 if bias is None else bias[None, :, None, None])


GEOMETRIES = [  # (ic, oc, kernel, hw, strides, pads, dilations)
    (64, 20, (1, 1), (7, 5), (1, 1), (0, 0, 0, 0), (1, 1)),
    (64, 36, (3, 3), (9, 11), (1, 1), (1, 1, 1, 1), (1, 1)),
    (64, 16, (3, 3), (13, 9), (2, 2), (1, 0, 2, 1), (1, 1)),
    (64, 24, (3, 3), (11, 12), (1, 2), (2, 2, 2, 2), (2, 2)),
    (128, 8, (7, 7), (15, 13), (2, 2), (3, 3, 3, 3), (1, 1)),
]


@pytest.mark.parametrize("geom", GEOMETRIES, ids=lambda g: f"{g[2][0]}x{g[2][1]}_s{g[4][0]}{g[4][1]}_d{g[6][0]}")
@pytest.mark.parametrize("bits,group,epilogue", [(8, -1, "none"), (4, 64, "silu"), (4, 32, "clip"),
                                                 (8, 32, "gelu_tanh")])
@pytest.mark.parametrize("k_order", list(op_conv.K_ORDERS))
def test_conv_reference_vs_direct_float64(rng, geom, bits, group, epilogue, k_order):
    ic, oc, kernel, hw, strides, pads, dilations = geom
    k = ic * kernel[0] * kernel[1]
    w4 = rng.standard_normal((oc, ic, *kernel)) / np.sqrt(k)
    qw = quantize_rtn(op_conv.matrix_of(w4, k_order).astype(np.float32), bits, group, False, "fp32")
    ep = EPILOGUES.get(epilogue)
    params = {"clip_min": -0.25, "clip_max": 0.5} if ep.params else {}
    attrs = op_conv.ConvAttributes(bits=bits, group_size=group, in_features=k, out_features=oc, has_bias=1,
                                   in_channels=ic, kernel_shape=kernel, strides=strides, pads=pads,
                                   dilations=dilations, k_order=k_order).with_epilogue(ep, **params)
    x = rng.standard_normal((2, ic, *hw)).astype(np.float32)
    bias = (rng.standard_normal(oc) * 0.3).astype(np.float32)
    y = op_conv.evaluate(x, interleaved_v1.pack(qw.u, bits), to_act_storage(qw.scales, "fp32"), None, bias, attrs)
    w_deq = op_conv.onnx_weight(qw.dequantize(), attrs)
    assert np.array_equal(op_conv.matrix_of(w_deq, k_order), qw.dequantize())
    ref = ep.reference(direct_conv(x.astype(np.float64), w_deq, bias.astype(np.float64), strides, pads, dilations),
                       **params)
    assert y.shape == ref.shape and y.dtype == np.float32
    assert np.all(np.abs(y - ref) <= 2.0**-23 * np.abs(ref) + 1e-30)  # float64 math, one rounding to float32


def test_attribute_round_trip_and_validation():
    a = op_conv.ConvAttributes(bits=4, group_size=64, in_features=576, out_features=32, in_channels=64,
                               kernel_shape=(3, 3), strides=(2, 1), pads=(1, 0, 1, 2), dilations=(1, 2),
                               activation=EPILOGUES.get("clip").c_enum, clip_min=0.0, clip_max=6.0)
    d = a.validate().to_dict()
    assert d["pads"] == [1, 0, 1, 2] and d["clip_max"] == 6.0 and d["activation"] == 2
    assert op_conv.ConvAttributes.from_dict(d) == a and "k_order" not in d  # the default (c, i, j): no attribute
    ijc = dataclasses.replace(a, k_order=op_conv.K_ORDER_IJC)
    assert ijc.validate().to_dict()["k_order"] == 1 and op_conv.ConvAttributes.from_dict(ijc.to_dict()) == ijc
    with pytest.raises(QuantizationError, match="k_order must be one of 0 \\(c, i, j\\), 1 \\(i, j, c\\), got 2"):
        dataclasses.replace(a, k_order=2).validate()
    assert a.output_hw(9, 9) == (5, 7)
    with pytest.raises(QuantizationError, match="in_features 576 must equal in_channels 32"):
        op_conv.ConvAttributes(bits=4, group_size=64, in_features=576, out_features=32, in_channels=32,
                               kernel_shape=(3, 3)).validate()
    with pytest.raises(QuantizationError, match="activation 9 is not one of"):
        op_conv.ConvAttributes(bits=4, group_size=64, in_features=64, out_features=32, in_channels=64,
                               activation=9).validate()
    with pytest.raises(QuantizationError, match="needs attribute"):
        op_conv.ConvAttributes.from_dict({**a.to_dict(), "clip_min": None})
