"""Accuracy of a quantized model against its original, through polygraphy's Comparator and ONNX Runtime.

    report = compare("model.onnx", "model.woq.onnx")            # or data="inputs.npz", data_script="load.py:FUNC"
    print(report.format())   # per output: max abs error, max rel error, cosine; the threshold; PASSED | FAILED

PASSED means: every output of the quantized model is finite and non-empty and its cosine similarity to the
original's (over all samples) is at least ``min_cosine``, by default :data:`DEFAULT_MIN_COSINE` for the lowest weight
bit width found in the quantized model (shown in the output).

Inputs: real ones from an ``.npz`` file or a data-loader script (:mod:`graph_passes.feeds`), else one generated
sample (seeded): floats N(0, 1); by input name, masks (``*mask*``) all ones, ``*token_type*`` zeros, ``*position*``
``0 .. seq-1`` along the last axis; other integer inputs (``input_ids``) index the rows of the constant table a
Gather reads them with, else ``[0, 16)``. Dynamic dims come from ``input_shapes``; a named dim given for one input
(``seq`` of input_ids) holds for every input that shares it; the rest default to 2 (first dim) and 32.

A plugin-format model (``trt_woq::WeightOnlyLinear`` nodes) cannot run in ONNX Runtime, so it runs as its **Q/DQ
twin**, built here by unpacking every WeightOnlyLinear node's packed weight (subgraphs included) into
``DequantizeLinear`` (opset 21, ``block_size`` for groups) + ``MatMul`` (+ ``Add`` for the bias): the same integer
values, scales and zero points that the plugin reads, so the comparison measures what the file holds. A W8A8 node
(``act_mode`` 1) has no standard-ONNX form (ONNX's ``DynamicQuantizeLinear`` is per tensor): its twin is a **float
emulation** that computes the per-token codes, scales and offsets with the same float32 steps as the kernel
(``graph_passes.quantizers.activations``: Reduce*, Div, Round half to even, Clip) and multiplies their read-back
``s * a + o`` with the dequantized weight in float32, so it differs from the integer GEMM only by float32 rounding
of the products and sums. FP6, which ONNX has no type for, becomes its dequantized weight as a float constant.
:func:`write_twin` (the CLI's ``twin``) saves the twin for other harnesses.

ONNX Runtime runs with graph optimizations at the BASIC level: at its default level it fuses DequantizeLinear +
MatMul into MatMulNBits, which quantizes the activations to int8 (accuracy level 4) and adds about 1% error that the
TensorRT plugin does not have. The TensorRT side (``python -m trt_woq compare``) lives in ``trt_woq.compare`` and
reuses :func:`prepare` and :class:`CompareReport`; this module never imports ``trt_woq``.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from graph_passes.errors import UserError
from graph_passes.files import check_model_path
from graph_passes.layouts import get_layout
from graph_passes.passes.checks import by_bits
from graph_passes.passes.scopes import all_graphs, node_bodies

OP_TYPE = "WeightOnlyLinear"
CONV_OP_TYPE = "WeightOnlyConv"
OP_TYPES = (OP_TYPE, CONV_OP_TYPE)
DOMAIN = "trt_woq"
DEFAULT_BATCH = 2        # a dynamic first dimension
DEFAULT_DYNAMIC_DIM = 32  # any other dynamic dimension (sequence length, ...)
SMALL_INT_RANGE = 16     # integer inputs that index no constant table: drawn from [0, 16)
MAX_GENERATED_ELEMENTS = 1 << 28  # per generated input (1 GiB of float32)
QDQ_OPSET = 21           # DequantizeLinear with block_size and 4-bit types
# PASSED needs every output's cosine >= this, by the lowest weight bit width in the quantized model. Measured on the
# sample (samples/llama defaults, logits, input_ids [2, 32], input seeds 0..39): INT8 per-channel min 0.99927
# (median 0.99951); FP6 per-channel min 0.9738, FP6 g128 min 0.9695 (medians 0.980); INT4 g128 min 0.902, INT4
# per-channel min 0.864 (medians 0.93); W8A8 (INT8 weights, activations quantized per token) per-channel min
# 0.98508, g128 min 0.99411 (medians 0.9905, 0.9963). Each threshold sits below the worst seen, so a regular
# quantization passes; broken ones land far below (0.75 for a BERT fed random masks, 0.05 for a bf16 overflow, 0.0
# for weights flushed to zero). Deeper or trained models may lose more: --min-cosine.
DEFAULT_MIN_COSINE = {8: 0.999, 6: 0.96, 4: 0.85}
W8A8_MIN_COSINE = 0.98  # a model with W8A8 nodes: their activation rounding, not the weights', dominates


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class OutputComparison:
    """One output of the two models (over every sample), compared in float64."""

    name: str
    shape: tuple          # of the first sample
    max_abs: float        # max |q - o|
    max_rel: float        # max |q - o| / max |o|  (normwise: elementwise ratios explode where o is near zero)
    mean_abs: float       # mean |q - o|
    cosine: float         # <o, q> / (|o| |q|) over the flattened output
    finite: bool          # no NaN / Inf in the quantized output
    size: int             # elements compared

    def problem(self, min_cosine: float) -> str | None:
        """Why this output fails, or None when it passes."""
        if not self.finite:
            return "NaN/Inf"
        if self.size == 0:
            return "empty output"
        if not self.cosine >= min_cosine:
            return "below the required cosine"
        return None

    def passes(self, min_cosine: float) -> bool:
        return self.problem(min_cosine) is None


@dataclass
class CompareReport:
    original: str
    quantized: str
    via: str                                   # how the quantized model ran
    input_shapes: dict[str, tuple]             # of the first sample
    seed: int
    min_cosine: float
    threshold: str = "--min-cosine"            # where min_cosine comes from
    inputs: str = ""                           # where the inputs come from
    samples: int = 1
    outputs: list[OutputComparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when there are outputs and every one is finite, non-empty and has cosine >= min_cosine."""
        return bool(self.outputs) and all(o.passes(self.min_cosine) for o in self.outputs)

    def add_outputs(self, original, o_runs: list, q_runs: list, where: str) -> None:
        """Compares every output of the ``original`` ModelProto over the runs (one dict of outputs a sample)."""
        for out in original.graph.output:
            if any(out.name not in r for r in q_runs):
                raise UserError(f"output {out.name} of the original model is missing from {where}")
            o = [np.asarray(r[out.name]) for r in o_runs]
            q = [np.asarray(r[out.name]) for r in q_runs]
            for oi, qi in zip(o, q):
                if oi.shape != qi.shape:
                    raise UserError(f"output {out.name}: shapes differ, original {oi.shape} vs quantized {qi.shape}")
            flat = compare_arrays(out.name, np.concatenate([x.ravel() for x in o]),
                                  np.concatenate([x.ravel() for x in q]))
            self.outputs.append(dataclasses.replace(flat, shape=o[0].shape))

    def format(self) -> str:
        shapes = ", ".join(f"{k} {list(v)}" for k, v in self.input_shapes.items())
        lines = [f"compare: {self.original} vs {self.quantized}",
                 f"  quantized model run as: {self.via}",
                 f"  inputs: {self.inputs or f'generated (seed {self.seed})'}; {shapes}"
                 + (f" (first of {self.samples} samples)" if self.samples > 1 else ""), ""]
        header = f"  {'output':<24} {'shape':<18} {'max abs err':>12} {'max rel err':>12} {'mean abs err':>12} " \
                 f"{'cosine':>10}"
        lines += [header, "  " + "-" * (len(header) - 2)]
        for o in self.outputs:
            cos = f"{o.cosine:.6f}" if o.finite and o.size != 0 else "-"
            problem = o.problem(self.min_cosine)
            lines.append(f"  {o.name:<24} {str(list(o.shape)):<18} {o.max_abs:>12.4g} {o.max_rel:>12.4g} "
                         f"{o.mean_abs:>12.4g} {cos:>10}" + (f"  <- {problem}" if problem else ""))
        lines += ["", f"  required: every output finite, non-empty, cosine >= {self.min_cosine} ({self.threshold})"]
        lines.append("PASSED" if self.passed else "FAILED")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"original": self.original, "quantized": self.quantized, "via": self.via, "seed": self.seed,
                "inputs": self.inputs, "samples": self.samples,
                "input_shapes": {k: list(v) for k, v in self.input_shapes.items()}, "min_cosine": self.min_cosine,
                "threshold": self.threshold, "passed": self.passed,
                "outputs": [{"name": o.name, "shape": list(o.shape), "max_abs": o.max_abs, "max_rel": o.max_rel,
                             "mean_abs": o.mean_abs, "cosine": o.cosine, "finite": o.finite, "size": o.size}
                            for o in self.outputs]}


def compare_arrays(name: str, original: np.ndarray, quantized: np.ndarray) -> OutputComparison:
    """The error figures of one output pair (float64 math)."""
    o = np.asarray(original, dtype=np.float64)
    q = np.asarray(quantized, dtype=np.float64)
    if o.shape != q.shape:
        raise UserError(f"output {name}: shapes differ, original {o.shape} vs quantized {q.shape}")
    finite = bool(np.isfinite(q).all())
    if not np.isfinite(o).all():
        raise UserError(f"output {name}: the ORIGINAL model produced NaN/Inf on these inputs; give other inputs "
                        f"or check the model")
    if not finite or o.size == 0:
        return OutputComparison(name, o.shape, float("inf"), float("inf"), float("inf"), float("nan"), finite, o.size)
    diff = np.abs(q - o)
    ref_max = float(np.abs(o).max())
    denom = float(np.linalg.norm(o) * np.linalg.norm(q))
    cosine = float(np.dot(o.ravel(), q.ravel()) / denom) if denom > 0 else (1.0 if diff.max() == 0 else 0.0)
    return OutputComparison(name, o.shape, float(diff.max()), float(diff.max() / ref_max) if ref_max > 0 else
                            float(diff.max()), float(diff.mean()), cosine, finite, o.size)


def quantized_bits(model) -> set[int]:
    """Bit widths of the quantized weights in ``model`` (plugin nodes and Q/DQ weights, subgraphs included)."""
    from onnx import TensorProto

    dq_bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.INT8: 8, TensorProto.UINT8: 8}
    bits = set()
    for g in all_graphs(model.graph):
        types = {t.name: t.data_type for t in g.initializer}
        for node in g.node:
            if _is_plugin(node):
                bits.add(int(_attrs(node).get("bits", 0)))
            elif node.op_type == "DequantizeLinear" and node.input and types.get(node.input[0]) in dq_bits:
                bits.add(dq_bits[types[node.input[0]]])
    return bits - {0}


def has_w8a8(model) -> bool:
    """Whether ``model`` holds a plugin node that quantizes its activations (``act_mode`` != 0), subgraphs included."""
    return any(_is_plugin(n) and int(_attrs(n).get("act_mode", 0)) != 0
               for g in all_graphs(model.graph) for n in g.node)


def default_min_cosine(model) -> tuple[float, str]:
    """(threshold, where it comes from) for the weights ``model`` holds: the lowest bit width's entry, or W8A8's
    when that is lower and the model has W8A8 nodes."""
    bits = quantized_bits(model)
    if not bits:
        return DEFAULT_MIN_COSINE[8], "default; no quantized weight found, as for INT8"
    b = min(bits)
    threshold = by_bits(DEFAULT_MIN_COSINE, b)
    if has_w8a8(model) and W8A8_MIN_COSINE < threshold:
        return W8A8_MIN_COSINE, "default for W8A8 (activations quantized per token); --min-cosine overrides"
    return threshold, f"default for {b}-bit weights; --min-cosine overrides"


# ---------------------------------------------------------------------------------------------------------------
# Plugin format -> Q/DQ twin
# ---------------------------------------------------------------------------------------------------------------

def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _int_tensor(name: str, values: np.ndarray, bits: int):
    """A UINT8 or UINT4 initializer from uint8 values, as raw data (UINT4: two per byte, low nibble first)."""
    from onnx import TensorProto, helper

    flat = np.ascontiguousarray(values, np.uint8).reshape(-1)
    if bits == 4:
        if flat.size % 2:
            flat = np.append(flat, np.uint8(0))
        flat = flat[0::2] | (flat[1::2] << 4)
    return helper.make_tensor(name, TensorProto.UINT4 if bits == 4 else TensorProto.UINT8, list(values.shape),
                              flat.tobytes(), raw=True)


def _is_plugin(node) -> bool:
    return node.op_type in OP_TYPES and node.domain == DOMAIN


def has_plugin_nodes(model) -> bool:
    return any(_is_plugin(n) for g in all_graphs(model.graph) for n in g.node)


def _node_attributes(node, name):
    from graph_passes.errors import QuantizationError
    from graph_passes.op import WoqAttributes
    from graph_passes.op_conv import ConvAttributes

    where = f"{node.op_type} node {name}"
    try:
        attrs = (ConvAttributes if node.op_type == CONV_OP_TYPE else WoqAttributes).from_dict(_attrs(node))
    except QuantizationError as exc:
        raise UserError(f"{where}: {exc}") from None
    try:
        return attrs.validate(where)
    except QuantizationError as exc:
        raise UserError(str(exc)) from None


def _dequantize_node(fmt, u, scales, zeros, group: int, compute_dtype, conv: bool, p: str, new_inits: list):
    """DequantizeLinear of integer codes ``u`` [K, N] (opset 21, ``block_size`` for groups) into ``{p}.weight``."""
    from onnx import helper, numpy_helper

    groups, n = scales.shape
    scales = scales.astype(compute_dtype)
    z = (np.full((groups, n), 1 << (fmt.bits - 1), np.uint8) if zeros is None
         else np.asarray(zeros.reshape(groups, n), np.float64).round().astype(np.uint8))
    # The conv weight is dequantized as W^T [N, K] and viewed as ONNX's [N, C, kh, kw] (op_conv's K orders).
    k_axis, n_axis = (1, 0) if conv else (0, 1)
    if conv:
        u, scales, z = u.T, scales.T, z.T
    u_name, s_name, z_name = f"{p}.weight_q", f"{p}.scale", f"{p}.zero_point"
    if group == -1:  # per output channel: per-axis DequantizeLinear on the N axis
        scales, z, dq_attrs = scales.reshape(n), z.reshape(n), {"axis": n_axis}
    else:
        dq_attrs = {"axis": k_axis, "block_size": group}
    new_inits += [_int_tensor(u_name, u, fmt.bits), numpy_helper.from_array(scales, s_name),
                  _int_tensor(z_name, z, fmt.bits)]
    return helper.make_node("DequantizeLinear", [u_name, s_name, z_name], [f"{p}.weight"], name=f"{p}.dequantize",
                            **dq_attrs)


def _node_to_qdq(node, inits: dict, new_inits: list, base_dir: str = "") -> list:
    """The nodes standing for one plugin node: DequantizeLinear + MatMul (+ Add) for WeightOnlyLinear,
    DequantizeLinear + Reshape + Conv for WeightOnlyConv, then the epilogue as standard ops (+ Casts for bf16)."""
    from onnx import TensorProto, helper, numpy_helper

    from graph_passes.passes.epilogue import twin_nodes
    from graph_passes.registry.formats import format_by_bits

    name = node.name or node.output[0]
    a = _node_attributes(node, name)
    bits, group, k, n = a.bits, a.group_size, a.in_features, a.out_features
    conv = node.op_type == CONV_OP_TYPE
    act_quant, act_asym = a.act_mode != 0, a.act_asymmetric
    if len(node.input) != a.num_inputs:
        raise UserError(f"{node.op_type} node {name}: {len(node.input)} inputs, expected {a.num_inputs} for "
                        f"has_zeros={a.has_zeros}, has_bias={a.has_bias}, act_asymmetric={act_asym}")
    consts = []
    for i in node.input[1:]:
        if i not in inits:
            raise UserError(f"{node.op_type} node {name}: input {i} is not an initializer; only constant weights "
                            f"can be turned into a Q/DQ twin")
        consts.append(numpy_helper.to_array(inits[i], base_dir=base_dir))  # external data: read here, not kept
    packed, scales = consts[0], consts[1]
    zeros = consts[2] if a.has_zeros else None
    bias = consts[2 + a.has_zeros] if a.has_bias else None
    groups = a.num_groups
    for what, arr in (("scales", scales), ("zero points", zeros)):
        if arr is not None and arr.size != groups * n:
            raise UserError(f"{node.op_type} node {name}: {arr.size} {what}, expected {groups} x {n} for "
                            f"in_features {k}, out_features {n}, group_size {group}")
    scales = scales.reshape(groups, n)
    act_dtype = scales.dtype
    # ORT's CPU kernels have no bf16 DequantizeLinear / MatMul: compute a bf16 node in float32 between Casts.
    # W8A8 emulates the activation quantization in float32 (below), between the same Casts.
    compute_dtype = np.dtype(np.float32) if act_dtype.name == "bfloat16" or act_quant else act_dtype
    p = f"{name}.qdq"
    fmt = format_by_bits(bits, f"{node.op_type} node {name}")
    if fmt.qdq is None:
        # ONNX has no type for these codes (FP6): the float64 reference rounded once to the activation dtype (the
        # op's exact product, one rounding), as a constant; conv: W^T [N, K] as below.
        w = fmt.dequantize(packed, scales.astype(np.float64), None, k, n, group).astype(act_dtype)
        new_inits.append(numpy_helper.from_array((w.T if conv else w).astype(compute_dtype), f"{p}.weight"))
        weight_nodes = []
    else:
        weight_nodes = [_dequantize_node(fmt, get_layout(a.layout).unpack(packed, k, n, bits), scales, zeros, group,
                                         compute_dtype, conv, p, new_inits)]
    nodes = []
    x = node.input[0]
    if compute_dtype != act_dtype:
        nodes.append(helper.make_node("Cast", [x], [f"{p}.x_f32"], name=f"{p}.cast_x", to=TensorProto.FLOAT))
        x = f"{p}.x_f32"
    if act_quant:
        act_nodes, act_inits, x = _act_quant_emulation(p, x, k, k if group == -1 else group, bool(act_asym))
        nodes += act_nodes
        new_inits += act_inits
    nodes += weight_nodes
    b_name = f"{p}.bias"
    if bias is not None:
        new_inits.append(numpy_helper.from_array(bias.astype(compute_dtype), b_name))
    if conv:
        shape_name = f"{p}.weight_shape"
        view, perm = a.onnx_view()
        new_inits.append(numpy_helper.from_array(np.array(view, np.int64), shape_name))
        nodes.append(helper.make_node("Reshape", [f"{p}.weight", shape_name], [f"{p}.weight4"], name=f"{p}.reshape"))
        if perm is not None:
            nodes.append(helper.make_node("Transpose", [f"{p}.weight4"], [f"{p}.weight4t"], name=f"{p}.transpose",
                                          perm=list(perm)))
        nodes.append(helper.make_node("Conv", [x, nodes[-1].output[0]] + ([b_name] if bias is not None else []),
                                      [f"{p}.conv_out"], name=f"{p}.conv", kernel_shape=list(a.kernel_shape),
                                      strides=list(a.strides), pads=list(a.pads), dilations=list(a.dilations)))
    else:
        nodes.append(helper.make_node("MatMul", [x, f"{p}.weight"], [f"{p}.matmul_out"], name=f"{p}.matmul"))
        if bias is not None:
            nodes.append(helper.make_node("Add", [f"{p}.matmul_out", b_name], [f"{p}.add_out"], name=f"{p}.add_bias"))
    if a.epilogue.name != "none":
        act_nodes, act_inits = twin_nodes(a.epilogue, a.epilogue_params(), nodes[-1].output[0],
                                          f"{p}.activation_out", p, compute_dtype)
        nodes += act_nodes
        new_inits += act_inits
    if compute_dtype != act_dtype:
        nodes.append(helper.make_node("Cast", [nodes[-1].output[0]], [f"{p}.y"], name=f"{p}.cast_y",
                                      to=helper.np_dtype_to_tensor_dtype(act_dtype)))
    nodes[-1].output[0] = node.output[0]
    return nodes


def _graph_to_qdq(graph, outer: dict, base_dir: str) -> None:
    """Rewrites ``graph`` and its subgraphs in place; ``outer``: initializers visible from enclosing scopes. Each
    node's new tensors join the graph as the node is converted (one copy of them at a time)."""
    inits = {**outer, **{t.name: t for t in graph.initializer}}
    new_nodes = []
    for node in graph.node:
        for _, g in node_bodies(node):
            _graph_to_qdq(g, inits, base_dir)
        if _is_plugin(node):
            new_inits = []
            new_nodes += _node_to_qdq(node, inits, new_inits, base_dir)
            graph.initializer.extend(new_inits)
            del new_inits
        else:
            new_nodes.append(node)
    del graph.node[:]
    graph.node.extend(new_nodes)


def plugin_to_qdq(model, base_dir: str = ""):
    """A copy of ``model`` where every WeightOnlyLinear node (subgraphs included) is DequantizeLinear + MatMul
    (+ Add bias) and every WeightOnlyConv node DequantizeLinear + Reshape + Conv, each followed by its epilogue as
    standard ops.

    The integer weights are unpacked from the node's packed initializer, so the twin computes with exactly the
    values the plugin reads. A model loaded without its external data (``onnx.load(..., load_external_data=False)``,
    as big models should be) gives the folder of its data files as ``base_dir``: each packed weight is read when its
    node is converted, and the tensors the twin keeps still refer to the files there. Needs default-domain opset
    >= 21 (the quantizer writes 21); an older model is refused with a message rather than silently converted.
    """
    import onnx

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset < QDQ_OPSET:
        raise UserError(f"the quantized model imports ONNX opset {opset}; its Q/DQ twin needs opset >= {QDQ_OPSET} "
                        f"(blocked DequantizeLinear). Re-run the quantizer, which writes opset {QDQ_OPSET}")
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    graphs = list(all_graphs(twin.graph))
    # Packed tensors that only plugin nodes read (in any graph) are dropped once every node is rewritten.
    drop = {i for g in graphs for n in g.node if _is_plugin(n) for i in n.input[1:]}
    drop -= {i for g in graphs for n in g.node if not _is_plugin(n) for i in n.input}
    _graph_to_qdq(twin.graph, {}, base_dir)
    for g in all_graphs(twin.graph):
        for i in reversed([i for i, t in enumerate(g.initializer) if t.name in drop]):  # in place: no copies
            del g.initializer[i]
    if not any(nd.domain == DOMAIN for g in all_graphs(twin.graph) for nd in g.node):
        imports = [o for o in twin.opset_import if o.domain != DOMAIN]
        del twin.opset_import[:]
        twin.opset_import.extend(imports)
    return twin


def _act_quant_emulation(p: str, x: str, k: int, block: int, asymmetric: bool):
    """(nodes, initializers, output name): float32 ``x`` [..., K] -> ``s * a + o`` per row block of ``block``, the
    steps of ``graph_passes.quantizers.activations`` in standard ONNX ops (opset 18+: Reduce* take axes inputs)."""
    from onnx import helper, numpy_helper

    def const(suffix, value, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(value, dtype), f"{p}.act.{suffix}")

    inits = [const("blocks", [-1, k // block, block], np.int64), const("axis", [-1], np.int64),
             const("one", 1.0), const("zero", 0.0)]
    nodes = []

    def node(op, inputs, suffix, **attrs):
        out = f"{p}.act.{suffix}"
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    c = {i.name.rsplit(".", 1)[-1]: i.name for i in inits}
    shape = node("Shape", [x], "shape")
    xb = node("Reshape", [x, c["blocks"]], "x_blocks")
    if asymmetric:
        inits += [const("levels", 255.0), const("half", 128.0), const("qmin", -128.0), const("qmax", 127.0)]
        lo = node("ReduceMin", [xb, c["axis"]], "min", keepdims=1)
        hi = node("ReduceMax", [xb, c["axis"]], "max", keepdims=1)
        s = node("Div", [node("Sub", [hi, lo], "range"), f"{p}.act.levels"], "scale")
        o = node("Add", [lo, node("Mul", [f"{p}.act.half", s], "half_scale")], "offset")
        centred = node("Sub", [xb, o], "centred")
    else:
        inits += [const("levels", 127.0), const("qmin", -127.0), const("qmax", 127.0)]
        amax = node("ReduceMax", [node("Abs", [xb], "abs"), c["axis"]], "absmax", keepdims=1)
        s = node("Div", [amax, f"{p}.act.levels"], "scale")
        o, centred = None, xb
    div = node("Where", [node("Equal", [s, c["zero"]], "scale_is_zero"), c["one"], s], "divisor")
    q = node("Clip", [node("Round", [node("Div", [centred, div], "ratio")], "round"), f"{p}.act.qmin",
                      f"{p}.act.qmax"], "codes")
    xd = node("Mul", [q, s], "scaled")
    if o is not None:
        xd = node("Add", [xd, o], "dequantized")
    return nodes, inits, node("Reshape", [xd, shape], "x")


def write_twin(quantized_path: str, output_path: str, *, force: bool = False) -> int:
    """Write the ONNX-Runtime-runnable twin of the plugin-format model ``quantized_path`` (:func:`plugin_to_qdq`) to
    ``output_path`` (nothing is written on an error); returns the number of plugin nodes replaced."""
    from graph_passes.pipeline import (EXTERNAL_DATA_THRESHOLD, _initializer_bytes, _outputs, load_model,
                                       save_model)

    model, base_dir, data_files = load_model(quantized_path)
    outputs = _outputs(quantized_path, data_files, force)
    outputs.add(output_path, "twin model", "choose another output path (-o)")
    count = sum(_is_plugin(n) for g in all_graphs(model.graph) for n in g.node)
    if not count:
        raise UserError(f"{quantized_path}: has no {DOMAIN}::{OP_TYPE} or {CONV_OP_TYPE} node; it runs in ONNX "
                        "Runtime as it is")
    twin = plugin_to_qdq(model, base_dir)  # save_model reads the kept tensors' external data
    del model
    external = bool(data_files) or _initializer_bytes(twin) >= EXTERNAL_DATA_THRESHOLD
    if external:
        outputs.add(output_path + ".data", "twin's external data", "choose another output path (-o)")
    with outputs:
        save_model(twin, output_path, outputs, base_dir, external)
        outputs.commit()
    return count


# ---------------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------------

def input_role(name: str) -> str | None:
    """What an input's name says it holds: "token_types", "positions", "mask", "ids", or None."""
    n = name.lower()
    for role, words in (("token_types", ("token_type",)), ("positions", ("position",)), ("mask", ("mask",)),
                        ("ids", ("ids",))):
        if any(w in n for w in words):
            return role
    return None


def _gather_rows(model, input_name: str) -> int | None:
    """Rows of the constant table that ``input_name`` indexes (directly or through Casts) with a Gather, if any."""
    inits = {t.name: t for t in model.graph.initializer}
    names = {input_name}
    for node in model.graph.node:  # nodes are topologically sorted: Casts of Casts are followed too
        if node.op_type == "Cast" and node.input and node.input[0] in names:
            names.add(node.output[0])
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in names and node.input[0] in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = inits[node.input[0]].dims
            if -len(dims) <= axis < len(dims):
                return int(dims[axis])
    return None


def _input_shapes(specs, input_shapes: dict) -> dict[str, tuple]:
    """Concrete shapes: given ones checked, named dynamic dims bound by them, the rest from the defaults."""
    known = {s.name for s in specs}
    unknown = set(input_shapes) - known
    if unknown:
        raise UserError(f"--input-shape names {', '.join(sorted(unknown))}, which the model does not have; its "
                        f"inputs are {', '.join(s.name for s in specs)}")
    bound: dict[str, int] = {}
    for s in specs:
        if s.name not in input_shapes:
            continue
        shape = input_shapes[s.name]
        if len(shape) != len(s.shape) or any(isinstance(d, int) and d != v for d, v in zip(s.shape, shape)):
            raise UserError(f"input {s.name}: shape {list(shape)} does not match the model's {s.shown}")
        if any(v < 1 for v in shape) or int(np.prod(shape, dtype=np.float64)) > MAX_GENERATED_ELEMENTS:
            raise UserError(f"input {s.name}: shape {list(shape)}: every dim must be >= 1 and the input at most "
                            f"{MAX_GENERATED_ELEMENTS} elements")
        bound.update((d, v) for d, v in zip(s.shape, shape) if isinstance(d, str))
    shapes = {}
    for s in specs:
        shapes[s.name] = input_shapes.get(s.name) or tuple(
            d if isinstance(d, int) else bound.get(d, DEFAULT_BATCH if i == 0 else DEFAULT_DYNAMIC_DIM)
            for i, d in enumerate(s.shape))
    return shapes


def make_inputs(model, input_shapes: dict | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """One generated feed dict for ``model``'s graph inputs (initializers excluded), as the module docstring says."""
    from graph_passes.feeds import model_input_specs

    if seed < 0:
        raise UserError(f"seed must be >= 0, got {seed}")
    specs = model_input_specs(model)
    shapes = _input_shapes(specs, {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()})
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in specs:
        shape, dtype, role = shapes[s.name], s.dtype, input_role(s.name)
        floating = np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16"
        if role == "mask" and (floating or dtype == np.bool_ or np.issubdtype(dtype, np.integer)):
            feeds[s.name] = np.ones(shape, dtype)
        elif floating:
            feeds[s.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[s.name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif not np.issubdtype(dtype, np.integer):
            raise UserError(f"input {s.name}: cannot generate data of type {dtype}; give real inputs with --data")
        elif role == "token_types":
            feeds[s.name] = np.zeros(shape, dtype)
        elif role == "positions":
            feeds[s.name] = np.broadcast_to(np.arange(shape[-1] if shape else 1), shape).astype(dtype)
        else:
            high = _gather_rows(model, s.name) or SMALL_INT_RANGE
            feeds[s.name] = rng.integers(0, high, shape).astype(dtype)
    return feeds


def load_feeds(model, *, input_shapes: dict | None = None, seed: int = 0, data: str | None = None,
               data_script: str | None = None, samples: int | None = None) -> tuple[list[dict], str]:
    """(feed dicts, where they come from): real inputs from ``data`` / ``data_script``, else one generated sample."""
    from graph_passes import feeds as real

    if data and data_script:
        raise UserError("give --data or --data-script, not both")
    if (data or data_script) and input_shapes:
        raise UserError("--input-shape shapes generated inputs; with --data / --data-script the data sets the shapes")
    if samples is not None and not (data or data_script):
        raise UserError("--samples counts samples of --data / --data-script; generated inputs are one sample")
    feeds = real.load_feeds(data, data_script, real.model_input_specs(model), samples)
    if feeds is not None:
        return feeds, f"{len(feeds)} sample(s) from {data or data_script}"
    return [make_inputs(model, input_shapes, seed)], f"generated (seed {seed})"


# ---------------------------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------------------------

def load(path: str, external_data: bool = False):
    """The model; weights stored as external data are read only when asked (the graph and dims are enough unless a
    Q/DQ twin has to be built), which keeps memory down for big models: ONNX Runtime reads the files itself."""
    import onnx

    check_model_path(path)
    try:
        return onnx.load(str(path), load_external_data=external_data)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... for a file that is not ONNX
        raise UserError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None


def prepare(original_path, quantized_path, via: str, *, input_shapes: dict | None = None, seed: int = 0,
            min_cosine: float | None = None, data: str | None = None, data_script: str | None = None,
            samples: int | None = None):
    """(original ModelProto, quantized ModelProto, feeds, empty CompareReport): the part of a comparison that does
    not depend on how the models run (the TensorRT comparison of trt_woq.compare shares it)."""
    if min_cosine is not None and not (-1.0 <= min_cosine <= 1.0):
        raise UserError(f"--min-cosine {min_cosine} is not in [-1, 1]")
    original_path, quantized_path = str(original_path), str(quantized_path)
    original = load(original_path)
    quantized = load(quantized_path)
    feeds, inputs = load_feeds(original, input_shapes=input_shapes, seed=seed, data=data, data_script=data_script,
                               samples=samples)
    q_inputs = {i.name for i in quantized.graph.input} - {t.name for t in quantized.graph.initializer}
    if q_inputs != set(feeds[0]):
        raise UserError(f"the models have different inputs: {sorted(feeds[0])} vs {sorted(q_inputs)}")
    threshold = "--min-cosine"
    if min_cosine is None:
        min_cosine, threshold = default_min_cosine(quantized)
    report = CompareReport(original_path, quantized_path, via, {k: v.shape for k, v in feeds[0].items()}, seed,
                           min_cosine, threshold, inputs, len(feeds))
    return original, quantized, feeds, report


def _session(model_path: str, name: str):
    import onnxruntime as ort
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    # ORT would also log a failing node (e.g. ids past the embedding table) on stderr, in colour, before raising: the
    # error reaches the user once, as compare's one line.
    ort.set_default_logger_severity(4)
    loader = SessionFromOnnx(model_path, providers=["CPUExecutionProvider"],
                             graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    return OnnxrtRunner(loader, name=name)


def compare(original_path, quantized_path, *, input_shapes: dict | None = None, seed: int = 0,
            min_cosine: float | None = None, data: str | None = None, data_script: str | None = None,
            samples: int | None = None) -> CompareReport:
    """Run both models with ONNX Runtime on the same inputs and compare every output (see the module docstring)."""
    try:
        import onnxruntime  # noqa: F401
        from polygraphy.comparator import Comparator
    except ImportError as exc:
        raise UserError(f"compare needs polygraphy and onnxruntime: pip install polygraphy onnxruntime ({exc})") \
            from None

    original, quantized, feeds, report = prepare(
        original_path, quantized_path, "onnxruntime (CPU)", input_shapes=input_shapes, seed=seed,
        min_cosine=min_cosine, data=data, data_script=data_script, samples=samples)
    with tempfile.TemporaryDirectory(prefix="trt_woq_compare_") as tmp:
        run_paths = {}
        for role, path, model in (("original", report.original, original),
                                  ("quantized", report.quantized, quantized)):
            run_paths[role] = path
            if has_plugin_nodes(model):
                import onnx

                from onnx.external_data_helper import load_external_data_for_model

                base_dir = os.path.dirname(os.path.abspath(path))
                twin = plugin_to_qdq(load(path), base_dir)  # packed weights read one at a time
                load_external_data_for_model(twin, base_dir)  # what the twin keeps, to save it beside the twin
                run_paths[role] = os.path.join(tmp, f"{role}_qdq_twin.onnx")
                # External data keeps models over 2 GB saveable; ORT reads it from beside the file.
                onnx.save(twin, run_paths[role], save_as_external_data=True, location=f"{role}_qdq_twin.onnx.data")
                del twin
                report.via = ("onnxruntime (CPU), plugin nodes replaced by their Q/DQ twin (DequantizeLinear + "
                              "MatMul / Conv; FP6: dequantized float weights)")
        del quantized
        runners = [_session(run_paths["original"], "original"), _session(run_paths["quantized"], "quantized")]
        try:
            from polygraphy.logger import G_LOGGER

            with G_LOGGER.verbosity(G_LOGGER.WARNING):
                results = Comparator.run(runners, data_loader=feeds)
        except Exception as exc:  # polygraphy wraps runner failures; keep the message, drop the traceback
            raise UserError(f"running the models failed: {' '.join(str(exc).split())}") from None
    report.add_outputs(original, list(results["original"]), list(results["quantized"]), "the quantized model")
    return report
