"""A fixture model where every AWQ fold applies, and its calibration data."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import woq_models as models

K, HIDDEN = 128, 256


def block(rng) -> onnx.ModelProto:
    """x [B, S, 128] -> LayerNormalization (a few gamma entries 20x: outlier channels) -> q, k (+bias), v -> their sum
    -> up (+bias; a few weight columns 20x) -> down -> y, plus a residual ``r = x + q`` that reads q's output.

    AWQ folds: q/k/v's input into the LayerNormalization; up's input (an Add) through a new Mul; down's input into
    up's weight columns and bias.
    """
    gamma = (1.0 + 0.1 * rng.standard_normal(K)).astype(np.float32)
    gamma[rng.choice(K, 3, replace=False)] *= 20.0
    up = models.weight(rng, K, HIDDEN)
    up[:, rng.choice(HIDDEN, 4, replace=False)] *= 20.0
    inits = [numpy_helper.from_array(gamma, "ln.gamma"),
             numpy_helper.from_array((0.1 * rng.standard_normal(K)).astype(np.float32), "ln.beta"),
             numpy_helper.from_array(models.weight(rng, K, K), "q.w"),
             numpy_helper.from_array(models.weight(rng, K, K), "k.w"),
             numpy_helper.from_array((0.1 * rng.standard_normal(K)).astype(np.float32), "k.b"),
             numpy_helper.from_array(models.weight(rng, K, K), "v.w"),
             numpy_helper.from_array(up, "up.w"),
             numpy_helper.from_array((0.1 * rng.standard_normal(HIDDEN)).astype(np.float32), "up.b"),
             numpy_helper.from_array(models.weight(rng, HIDDEN, K), "down.w")]
    mk = helper.make_node
    nodes = [mk("LayerNormalization", ["x", "ln.gamma", "ln.beta"], ["h"], name="ln", axis=-1, epsilon=1e-5),
             mk("MatMul", ["h", "q.w"], ["q"], name="q"),
             mk("MatMul", ["h", "k.w"], ["k0"], name="k"),
             mk("Add", ["k0", "k.b"], ["kk"], name="k.bias"),
             mk("MatMul", ["h", "v.w"], ["v"], name="v"),
             mk("Add", ["q", "kk"], ["qk"], name="sum1"),
             mk("Add", ["qk", "v"], ["s"], name="sum2"),
             mk("MatMul", ["s", "up.w"], ["u0"], name="up"),
             mk("Add", ["u0", "up.b"], ["u"], name="up.bias"),
             mk("MatMul", ["u", "down.w"], ["y"], name="down"),
             mk("Add", ["x", "q"], ["r"], name="residual")]
    vi = helper.make_tensor_value_info
    return models.make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", "S", K])],
                             [vi("y", TensorProto.FLOAT, ["B", "S", K]), vi("r", TensorProto.FLOAT, ["B", "S", K])],
                             inits, opset=17)


def samples(rng, n: int, seq: int = 16) -> np.ndarray:
    """[n, 1, seq, K] float32: sample i is fed as x[i] (batch 1)."""
    return rng.standard_normal((n, 1, seq, K)).astype(np.float32)
