"""A merged-decoder-shaped fixture: the model LLM exporters write when one file serves the first step and the steps
with a KV cache: an If on a flag whose two branches run the same projections on the same weight initializers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from woq_models import weight

K, HIDDEN = 128, 256


def merged_decoder(rng, gemm_in_else: bool = True):
    """x [B, S, K], use_cache_branch (bool) -> If_0 -> lm_head -> logits [B, S, K].

    Both branches: fc1 (MatMul w1 + Add b1), Relu, fc2 (MatMul w2), all weights in the main graph. The then branch
    scales x by 1, the else branch by 0.5. The then branch also holds a nested If (inner) whose two branches apply
    w3, an initializer of the then branch itself (a scope below the main graph). With ``gemm_in_else`` the else
    branch computes fc2 as a Gemm with transB on w2t (w2 transposed, another initializer) instead.
    """
    vi = helper.make_tensor_value_info
    w1, w2, w3, wl = weight(rng, K, HIDDEN), weight(rng, HIDDEN, K), weight(rng, K, K), weight(rng, K, K)
    b1 = (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32)

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    def mlp(p, scale, gemm=False):
        nodes = [helper.make_node("Mul", ["x", f"{p}_s"], [f"{p}_xs"], name=f"{p}_scale"),
                 helper.make_node("MatMul", [f"{p}_xs", "w1"], [f"{p}_h0"], name=f"{p}_fc1"),
                 helper.make_node("Add", [f"{p}_h0", "b1"], [f"{p}_h1"], name=f"{p}_fc1_bias"),
                 helper.make_node("Relu", [f"{p}_h1"], [f"{p}_h2"], name=f"{p}_act")]
        if gemm:  # Gemm needs 2-D: flatten [B, S, H] -> [B*S, H] and back
            nodes += [helper.make_node("Reshape", [f"{p}_h2", "flat"], [f"{p}_h2f"], name=f"{p}_flatten"),
                      helper.make_node("Gemm", [f"{p}_h2f", "w2t"], [f"{p}_yf"], name=f"{p}_fc2", transB=1),
                      helper.make_node("Shape", ["x"], [f"{p}_shape"], name=f"{p}_shape_of_x"),
                      helper.make_node("Reshape", [f"{p}_yf", f"{p}_shape"], [f"{p}_y"], name=f"{p}_unflatten")]
        else:
            nodes.append(helper.make_node("MatMul", [f"{p}_h2", "w2"], [f"{p}_y"], name=f"{p}_fc2"))
        return nodes, [const(f"{p}_s", scale)]

    then_nodes, then_inits = mlp("then", 1.0)
    inner = {b: helper.make_graph([helper.make_node("MatMul", ["then_y", "w3"], [f"inner_{b}_y"],
                                                    name=f"inner_{b}_proj")], f"inner_{b}", [],
                                  [vi(f"inner_{b}_y", TensorProto.FLOAT, None)]) for b in ("then", "else")}
    then_nodes.append(helper.make_node("If", ["use_cache_branch"], ["then_out"], name="If_inner",
                                       then_branch=inner["then"], else_branch=inner["else"]))
    then_inits.append(numpy_helper.from_array(w3, "w3"))
    else_nodes, else_inits = mlp("else", 0.5, gemm=gemm_in_else)
    branches = {
        "then_branch": helper.make_graph(then_nodes, "then", [], [vi("then_out", TensorProto.FLOAT, None)],
                                         initializer=then_inits),
        "else_branch": helper.make_graph(else_nodes, "else", [], [vi("else_y", TensorProto.FLOAT, None)],
                                         initializer=else_inits)}
    nodes = [helper.make_node("If", ["use_cache_branch"], ["hidden"], name="If_0", **branches),
             helper.make_node("MatMul", ["hidden", "wl"], ["logits"], name="lm_head")]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.ascontiguousarray(w2.T), "w2t"),
             numpy_helper.from_array(wl, "wl"), numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "flat")]
    graph = helper.make_graph(nodes, "merged_decoder",
                              [vi("x", TensorProto.FLOAT, ["B", "S", K]), vi("use_cache_branch", TensorProto.BOOL, [])],
                              [vi("logits", TensorProto.FLOAT, ["B", "S", K])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


LINEARS = ["If_0/else_branch/else_fc1", "If_0/else_branch/else_fc2", "If_0/then_branch/If_inner/else_branch/"
           "inner_else_proj", "If_0/then_branch/If_inner/then_branch/inner_then_proj", "If_0/then_branch/then_fc1",
           "If_0/then_branch/then_fc2", "lm_head"]


def merged_decoder_same_names(rng, distinct: bool = False):
    """x [B, S, K], use_cache_branch -> If_0 -> y [B, S, K], as optimum's merge_decoders writes a merged decoder: both
    branches run the same nodes under the same node and tensor names (xs = x * c, h = xs @ w1, a = Relu(h),
    y = a @ w2), reading w1 and w2 from the main graph, each with its own scalar initializer c (1 in the then
    branch, 3 in the else branch). ``distinct``: the else branch's tensors are named apart (e_xs, ...), nothing else
    changes."""
    vi = helper.make_tensor_value_info
    w1, w2 = weight(rng, K, HIDDEN), weight(rng, HIDDEN, K)

    def branch(name, scale, p=""):
        nodes = [helper.make_node("Mul", ["x", "c"], [f"{p}xs"], name="scale"),
                 helper.make_node("MatMul", [f"{p}xs", "w1"], [f"{p}h"], name="fc1"),
                 helper.make_node("Relu", [f"{p}h"], [f"{p}a"], name="act"),
                 helper.make_node("MatMul", [f"{p}a", "w2"], [f"{p}y"], name="fc2")]
        return helper.make_graph(nodes, name, [], [vi(f"{p}y", TensorProto.FLOAT, None)],
                                 initializer=[numpy_helper.from_array(np.float32(scale), "c")])

    nodes = [helper.make_node("If", ["use_cache_branch"], ["y"], name="If_0", then_branch=branch("with_past", 1.0),
                              else_branch=branch("no_past", 3.0, "e_" if distinct else ""))]
    graph = helper.make_graph(nodes, "merged_decoder",
                              [vi("x", TensorProto.FLOAT, ["B", "S", K]), vi("use_cache_branch", TensorProto.BOOL, [])],
                              [vi("y", TensorProto.FLOAT, ["B", "S", K])],
                              initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model
