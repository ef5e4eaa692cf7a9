"""Dynamic INT8 activation quantization (the W8A8 activation mode), the exact float32 steps the kernels take. Numpy.

Each row of ``X[..., K]`` is cut into blocks of ``B`` consecutive ``k`` (``B = G`` when the weights are grouped, else
``B = K``). Every step below is one IEEE float32 operation (correctly rounded, no fused multiply-add), so the CUDA
quantize kernel produces the same codes, scales and offsets bit for bit:

symmetric (default):
    ``s = max|x| / 127``, ``a = clip(rint(x / s'), -127, 127)``, ``o = 0``
asymmetric:
    ``s = (max x - min x) / 255``, ``o = min x + 128 * s``, ``a = clip(rint((x - o) / s'), -128, 127)``

with ``s' = s`` or 1 when ``s == 0`` (an all-zero block, or a constant one when asymmetric: codes 0, x = o).
``rint`` rounds half to even. The block then holds ``x ~ s * a + o``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.errors import QuantizationError


@dataclass
class QuantizedActivations:
    """``codes`` int8 ``[..., K]``; ``scales`` / ``offsets`` float32 ``[..., K / B]`` (offsets all 0 when
    symmetric); ``row_sums`` int32 ``[..., K / B]``: the sum of the codes of each block."""

    codes: np.ndarray
    scales: np.ndarray
    offsets: np.ndarray
    block: int

    @property
    def row_sums(self) -> np.ndarray:
        return self._blocks(self.codes.astype(np.int32)).sum(axis=-1)

    def _blocks(self, a: np.ndarray) -> np.ndarray:
        return a.reshape(*a.shape[:-1], a.shape[-1] // self.block, self.block)

    def dequantize(self) -> np.ndarray:
        """float64 ``s * a + o`` per block, ``[..., K]``."""
        a = self._blocks(self.codes.astype(np.float64))
        y = a * self.scales[..., None].astype(np.float64) + self.offsets[..., None].astype(np.float64)
        return y.reshape(self.codes.shape)


def block_size(k: int, group_size: int) -> int:
    """The activation block of a weight quantized with ``group_size`` (-1: one block per row)."""
    return k if group_size == -1 else group_size


def quantize_activations(x: np.ndarray, group_size: int, asymmetric: bool = False) -> QuantizedActivations:
    """Quantize ``x[..., K]`` (values exact in float32: fp16, bf16 or float32 inputs) per row and block."""
    x = np.asarray(x)
    k = x.shape[-1]
    b = block_size(k, group_size)
    if k % b:
        raise QuantizationError(f"activations: K = {k} is not a multiple of the block {b}")
    xf = x.astype(np.float32)
    if not np.isfinite(xf).all():
        raise QuantizationError("activations: NaN/Inf cannot be quantized")
    xb = xf.reshape(*x.shape[:-1], k // b, b)
    if asymmetric:
        lo, hi = xb.min(axis=-1), xb.max(axis=-1)
        s = (hi - lo) / np.float32(255)
        o = lo + np.float32(128) * s
        qmin, qmax = -128, 127
    else:
        s = np.abs(xb).max(axis=-1) / np.float32(127)
        o = np.zeros_like(s)
        qmin, qmax = -127, 127
    div = np.where(s == 0, np.float32(1), s)
    codes = np.clip(np.rint((xb - o[..., None]) / div[..., None]), qmin, qmax).astype(np.int8)
    return QuantizedActivations(codes.reshape(x.shape), s.astype(np.float32), o.astype(np.float32), b)
