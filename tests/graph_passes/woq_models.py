"""Small ONNX fixture models for the graph-pass tests, built with onnx.helper (random weights, fresh each call)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}


def weight(rng, k, n, dtype=np.float32, scale=0.05):
    """Realistic-looking weights: gaussian with a few outlier input channels; never all zeros."""
    w = rng.standard_normal((k, n)) * scale
    w[rng.integers(0, k, 2)] *= 3.0
    return w.astype(dtype)


def make_model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "fixture", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    onnx.checker.check_model(model)
    return model


def mlp(rng, dtype=np.float32, k=128, hidden=256, opset=17, rank=3):
    """X[B, S, K] -> MatMul(W1) + Add(b1) -> Relu -> MatMul(W2) -> Y[B, S, K]; dims B, S dynamic."""
    et = FLOAT[np.dtype(dtype)]
    dims = ["B", "S", k][-rank:] if rank <= 3 else ["A"] * (rank - 3) + ["B", "S", k]
    out_dims = dims[:-1] + [k]
    inits = [numpy_helper.from_array(weight(rng, k, hidden, dtype), "w1"),
             numpy_helper.from_array((rng.standard_normal(hidden) * 0.1).astype(dtype), "b1"),
             numpy_helper.from_array(weight(rng, hidden, k, dtype), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
             helper.make_node("Relu", ["h1"], ["h2"], name="act"),
             helper.make_node("MatMul", ["h2", "w2"], ["y"], name="fc2")]
    return make_model(nodes, [helper.make_tensor_value_info("x", et, dims)],
                      [helper.make_tensor_value_info("y", et, out_dims)], inits, opset)


def gemm(rng, k=128, n=256, alpha=0.5, beta=2.0, trans_b=1, with_c=True, opset=17, c_shape=None):
    """X[B, K] -> Gemm(W, C, alpha, beta, transB) -> Y[B, N]."""
    w = weight(rng, k, n)
    b = w.T.copy() if trans_b else w
    inits = [numpy_helper.from_array(b, "w")]
    ins = ["x", "w"]
    if with_c:
        c = (rng.standard_normal(c_shape or (n,)) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(c, "c"))
        ins.append("c")
    node = helper.make_node("Gemm", ins, ["y"], name="gemm", alpha=alpha, beta=beta, transB=trans_b)
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", k])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", n])], inits, opset)


def cast_transpose(rng, k=128, n=64, opset=17):
    """fp16 graph: y = x @ Cast(W32 -> fp16) and z = x @ Transpose(Wt16) (weights behind Cast / Transpose)."""
    inits = [numpy_helper.from_array(weight(rng, k, n, np.float32), "w32"),
             numpy_helper.from_array(weight(rng, k, n, np.float16).T.copy(), "wt")]
    nodes = [helper.make_node("Cast", ["w32"], ["w16"], name="cast_w", to=TensorProto.FLOAT16),
             helper.make_node("MatMul", ["x", "w16"], ["y"], name="mm_cast"),
             helper.make_node("Transpose", ["wt"], ["wtt"], name="transpose_w", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wtt"], ["z"], name="mm_transpose")]
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", TensorProto.FLOAT16, ["B", "S", k])],
                      [vi("y", TensorProto.FLOAT16, ["B", "S", n]), vi("z", TensorProto.FLOAT16, ["B", "S", n])],
                      inits, opset)


def shared(rng, k=128, n=128, opset=17):
    """Two MatMuls (one with a bias Add) using the same weight initializer."""
    inits = [numpy_helper.from_array(weight(rng, k, n), "w"),
             numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm_a"),
             helper.make_node("MatMul", ["a", "w"], ["b0"], name="mm_b"),
             helper.make_node("Add", ["b0", "b"], ["y"], name="mm_b_bias")]
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", k])], [vi("y", TensorProto.FLOAT, ["B", n])], inits,
                      opset)


def mixed(rng, opset=17, nan=False):
    """One quantizable MatMul plus nodes to skip: K=96 (not a multiple of 64), a non-constant weight, NaN weight."""
    w_ok = weight(rng, 128, 64)
    w_bad_k = weight(rng, 96, 64)
    w_nan = weight(rng, 128, 64)
    w_nan[3, 5] = np.nan if nan else w_nan[3, 5]
    inits = [numpy_helper.from_array(w_ok, "w_ok"), numpy_helper.from_array(w_bad_k, "w_bad_k"),
             numpy_helper.from_array(w_nan, "w_nan")]
    nodes = [helper.make_node("MatMul", ["x", "w_ok"], ["a"], name="good"),
             helper.make_node("MatMul", ["x96", "w_bad_k"], ["b"], name="bad_k"),
             helper.make_node("Transpose", ["a"], ["at"], name="t", perm=[1, 0]),
             helper.make_node("MatMul", ["a", "at"], ["c"], name="dynamic"),
             helper.make_node("MatMul", ["x", "w_nan"], ["d"], name="nan_node")]
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", 128]), vi("x96", TensorProto.FLOAT, ["B", 96])],
                      [vi("b", TensorProto.FLOAT, ["B", 64]), vi("c", TensorProto.FLOAT, ["B", "B"]),
                       vi("d", TensorProto.FLOAT, ["B", 64])], inits, opset)


def run_pass(model, **cfg):
    """(quantized ModelProto, QuantReport) of the configured pass on ``model``."""
    from graph_passes import QuantConfig, QuantReport
    from graph_passes.pipeline import run_passes

    report = QuantReport()
    return run_passes(model, QuantConfig(**cfg), report), report


def ort_run(model, feeds):
    """Outputs of ``model`` in ONNX Runtime (CPU). Graph optimizations are kept at BASIC: at ENABLE_ALL, ORT fuses
    DequantizeLinear + MatMul into MatMulNBits, which by default quantizes the activations to INT8 (accuracy level
    4), an approximation that has nothing to do with the model."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ref_run(model, feeds):
    """Outputs of a plugin-format ``model`` in onnx's ReferenceEvaluator with the WeightOnlyLinear reference."""
    from graph_passes.op import reference_evaluator

    return reference_evaluator(model).run(None, feeds)


# --------------------------------------------------------------------------------------------- activations, convs
def _scalar(inits, name, value, dtype=np.float32):
    inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
    return name


def activation(kind, x, y, inits, p="act", dtype=np.float32):
    """Nodes computing ``y = kind(x)`` the way exporters write it (decomposed GELUs in several op orders), constants
    in ``dtype``."""
    mk = helper.make_node
    c = lambda name, v: _scalar(inits, f"{p}_{name}", v, dtype)  # noqa: E731
    if kind == "relu":
        return [mk("Relu", [x], [y])]
    if kind == "relu6":
        return [mk("Clip", [x, c("lo", 0.0), c("hi", 6.0)], [y])]
    if kind == "clip_min_only":
        return [mk("Clip", [x, c("lo", -1.5)], [y])]
    if kind == "clip_attr_max_only":  # opset 6 - 10: bounds as attributes
        return [mk("Clip", [x], [y], max=6.0)]
    if kind == "silu":
        return [mk("Sigmoid", [x], [f"{p}_s"]), mk("Mul", [x, f"{p}_s"], [y])]
    if kind in ("gelu_op_erf", "gelu_op_tanh"):
        return [mk("Gelu", [x], [y], approximate="tanh" if kind.endswith("tanh") else "none")]
    if kind == "gelu_erf_div":  # x * 0.5 * (1 + erf(x / sqrt2)) as torch.onnx writes it
        return [mk("Div", [x, c("sqrt2", 1.4142135381698608)], [f"{p}_d"]), mk("Erf", [f"{p}_d"], [f"{p}_e"]),
                mk("Add", [f"{p}_e", c("one", 1.0)], [f"{p}_a"]), mk("Mul", [x, f"{p}_a"], [f"{p}_m"]),
                mk("Mul", [f"{p}_m", c("half", 0.5)], [y])]
    if kind == "gelu_erf_half_first":  # (0.5 * x) * (1 + erf(x * 0.7071))
        return [mk("Mul", [x, c("half", 0.5)], [f"{p}_h"]), mk("Mul", [x, c("rs2", 0.7071067690849304)], [f"{p}_d"]),
                mk("Erf", [f"{p}_d"], [f"{p}_e"]), mk("Add", [c("one", 1.0), f"{p}_e"], [f"{p}_a"]),
                mk("Mul", [f"{p}_h", f"{p}_a"], [y])]
    if kind == "gelu_tanh_pow":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return [mk("Pow", [x, c("three", 3.0)], [f"{p}_p"]), mk("Mul", [f"{p}_p", c("k", 0.044715)], [f"{p}_q"]),
                mk("Add", [x, f"{p}_q"], [f"{p}_r"]), mk("Mul", [f"{p}_r", c("s", 0.7978845834732056)], [f"{p}_t"]),
                mk("Tanh", [f"{p}_t"], [f"{p}_u"]), mk("Add", [f"{p}_u", c("one", 1.0)], [f"{p}_v"]),
                mk("Mul", [x, f"{p}_v"], [f"{p}_w"]), mk("Mul", [f"{p}_w", c("half", 0.5)], [y])]
    if kind == "gelu_tanh_mul":  # x^3 as x * x * x, 0.5 applied first
        return [mk("Mul", [x, x], [f"{p}_x2"]), mk("Mul", [f"{p}_x2", x], [f"{p}_x3"]),
                mk("Mul", [x, c("half", 0.5)], [f"{p}_h"]), mk("Mul", [f"{p}_x3", c("k", 0.044715)], [f"{p}_q"]),
                mk("Add", [x, f"{p}_q"], [f"{p}_r"]), mk("Mul", [c("s", 0.7978845834732056), f"{p}_r"], [f"{p}_t"]),
                mk("Tanh", [f"{p}_t"], [f"{p}_u"]), mk("Add", [f"{p}_u", c("one", 1.0)], [f"{p}_v"]),
                mk("Mul", [f"{p}_h", f"{p}_v"], [y])]
    raise ValueError(kind)


def linear_act(rng, kind, k=128, n=96, opset=21):
    """X[B, S, K] -> MatMul + Add(b) -> activation ``kind`` -> Y (float32)."""
    inits = [numpy_helper.from_array(weight(rng, k, n), "w"),
             numpy_helper.from_array((rng.standard_normal(n) * 0.5).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h0"], name="fc"),
             helper.make_node("Add", ["h0", "b"], ["h1"], name="fc_bias")] + activation(kind, "h1", "y", inits)
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", TensorProto.FLOAT, ["B", "S", k])], [vi("y", TensorProto.FLOAT, ["B", "S", n])],
                      inits, opset)


def conv_weight(rng, oc, ic, kh, kw, dtype=np.float32):
    return (rng.standard_normal((oc, ic, kh, kw)) * (1.0 / np.sqrt(ic * kh * kw))).astype(dtype)


def conv(rng, ic=64, oc=32, kernel=(3, 3), hw=(9, 11), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1),
         bias=True, add=False, act=None, dtype=np.float32, group=1, auto_pad=None, opset=21, name="conv",
         w=None):
    """X[N, IC, H, W] -> Conv (+ Add of [1, OC, 1, 1]) (+ activation) -> Y; N dynamic, H and W static."""
    et = FLOAT[np.dtype(dtype)]
    w = conv_weight(rng, oc, ic // group, *kernel, dtype) if w is None else w
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array((rng.standard_normal(oc) * 0.3).astype(dtype), "b"))
        ins.append("b")
    attrs = dict(kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations), group=group)
    attrs.update(dict(auto_pad=auto_pad) if auto_pad else dict(pads=list(pads)))
    cur = "c0"
    nodes = [helper.make_node("Conv", ins, [cur], name=name, **attrs)]
    if add:
        inits.append(numpy_helper.from_array((rng.standard_normal((1, oc, 1, 1)) * 0.3).astype(dtype), "b2"))
        nodes.append(helper.make_node("Add", [cur, "b2"], ["c1"], name=f"{name}_add"))
        cur = "c1"
    if act:
        nodes += activation(act, cur, "y", inits, dtype=dtype)
    else:
        nodes[-1].output[0] = "y"
    vi = helper.make_tensor_value_info
    return make_model(nodes, [vi("x", et, ["N", ic, *hw])], [vi("y", et, ["N", oc, "OH", "OW"])], inits, opset)
