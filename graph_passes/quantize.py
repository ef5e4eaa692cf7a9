"""Numpy API of the quantizer in the spirit of Paddle's ``weight_quantize`` / ``weight_dequantize`` /
``weight_only_linear``; ``algo`` names a weight format of ``graph_passes.registry.formats``
(``weight_only_int8``, ``weight_only_int4``, ``weight_only_fp6``). The packed tensor uses the format's layout
(``docs/layouts.md``; ``layout=None`` takes it, a number is checked against it).

The quantizers themselves live in ``graph_passes.quantizers`` and the activation-dtype helpers in
``graph_passes.dtypes``; both are re-exported here.
"""

from __future__ import annotations

import numpy as np

from graph_passes.dtypes import (ACT_DTYPES, act_dtype_name, act_numpy_dtype, round_bf16, round_to_act,
                                 to_act_storage)
from graph_passes.errors import QuantizationError
from graph_passes.quantizers import DEFAULT_CLIP_RATIOS, QuantizedWeight, check_weight, quantize_rtn
from graph_passes.registry.formats import WeightFormat, format_by_algo


def _format(algo: str, layout: int | None) -> WeightFormat:
    fmt = format_by_algo(algo)
    if layout is not None and layout != fmt.layout.VERSION:
        raise QuantizationError(f"{algo} is packed in layout {fmt.layout.VERSION} ({fmt.layout.NAME}), not {layout}")
    return fmt


def weight_quantize(w: np.ndarray, algo: str = "weight_only_int8", group_size: int = -1, asymmetric: bool = False,
                    act_dtype: str = "fp16", layout: int | None = None):
    """Quantize ``w[K, N]`` and pack it: returns ``(packed_int32, scales [K/G, N], zeros or None)``.

    Scales (and zeros, integer values) are in the activation dtype (``fp16``/``bf16``; ``fp32`` for references).
    """
    fmt = _format(algo, layout)
    qw = fmt.quantize(w, group_size, asymmetric, act_dtype)
    zeros = None if qw.zeros is None else to_act_storage(qw.zeros, act_dtype)
    return fmt.pack(qw.u), to_act_storage(qw.scales, act_dtype), zeros


def weight_dequantize(packed: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None = None, *, k: int | None = None,
                      n: int | None = None, algo: str = "weight_only_int8", group_size: int = -1,
                      layout: int | None = None) -> np.ndarray:
    """float64 ``W[K, N]`` from packed tensors (K, N default to what the packed shape implies)."""
    fmt = _format(algo, layout)
    k_packed, n_packed = fmt.layout.unpacked_shape(packed.shape, fmt.bits)
    k = k_packed if k is None else int(k)
    n = n_packed if n is None else int(n)
    return fmt.dequantize(packed, scales, zeros, k, n, group_size)


def weight_only_linear(x: np.ndarray, packed: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None = None,
                       bias: np.ndarray | None = None, *, algo: str = "weight_only_int8", group_size: int = -1,
                       layout: int | None = None) -> np.ndarray:
    """Numpy reference of ``Y = X @ W + bias``: float64 math, result in ``x``'s dtype. ``x`` is [..., K]."""
    w = weight_dequantize(packed, scales, zeros, algo=algo, group_size=group_size, layout=layout)
    x = np.asarray(x)
    if x.shape[-1] != w.shape[0]:
        raise QuantizationError(f"weight_only_linear: x has {x.shape[-1]} features, the weight expects K={w.shape[0]}")
    y = x.astype(np.float64) @ w
    if bias is not None:
        y = y + np.asarray(bias, np.float64)
    return y.astype(x.dtype)


__all__ = ["ACT_DTYPES", "DEFAULT_CLIP_RATIOS", "QuantizedWeight", "act_dtype_name", "act_numpy_dtype", "check_weight",
           "quantize_rtn", "round_bf16", "round_to_act", "to_act_storage", "weight_dequantize", "weight_only_linear",
           "weight_quantize"]
