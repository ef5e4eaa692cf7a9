"""Accuracy of a quantized model against its original, through polygraphy's Comparator and ONNX Runtime.

    report = compare("model.onnx", "model.woq.onnx", min_cosine=0.999)
    print(report.format())            # per output: max abs error, max rel error, cosine; then PASSED | FAILED

Both models run on the same generated inputs (a seeded generator: floats N(0, 1); integer inputs that index a
Gather of a constant table are drawn from that table's rows, others from [0, 16); dynamic dims from ``input_shapes``
or the defaults below). A plugin-format model (``trt_woq::WeightOnlyLinear`` nodes) cannot run in ONNX Runtime, so
it runs as its **Q/DQ twin**, built here by unpacking every WeightOnlyLinear node's packed weight into
``DequantizeLinear`` (opset 21, ``block_size`` for groups) + ``MatMul`` (+ ``Add`` for the bias): the same integer
values, scales and zero points that the plugin reads, so the comparison measures what the file holds. A W8A8 node (``act_mode`` 1) has no standard-ONNX form (ONNX's
``DynamicQuantizeLinear`` is per tensor): its twin is a **float emulation** that computes the per-token codes,
scales and offsets with the same float32 steps as the kernel (``graph_passes.quantizers.activations``: Reduce*,
Div, Round half to even, Clip) and multiplies their read-back ``s * a + o`` with the dequantized weight in float32,
so it differs from the integer GEMM only by float32 rounding of the products and sums.

ONNX Runtime runs with graph optimizations at the BASIC level: at its default level it fuses DequantizeLinear +
MatMul into MatMulNBits, which quantizes the activations to int8 (accuracy level 4) and adds about 1% error that the
TensorRT plugin does not have. ``use_trt=True`` hands the job to ``trt_woq.compare.compare_trt`` (the TensorRT
runner with our plugin) instead. polygraphy, onnxruntime and TensorRT are imported only when a comparison runs.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graph_passes.errors import UserError
from graph_passes.layouts import get_layout

OP_TYPE = "WeightOnlyLinear"
DOMAIN = "trt_woq"
DEFAULT_BATCH = 2        # a dynamic first dimension
DEFAULT_DYNAMIC_DIM = 32  # any other dynamic dimension (sequence length, ...)
QDQ_OPSET = 21           # DequantizeLinear with block_size and 4-bit types


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class OutputComparison:
    """One output of the two models, compared in float64."""

    name: str
    shape: tuple
    max_abs: float        # max |q - o|
    max_rel: float        # max |q - o| / max |o|  (normwise: elementwise ratios explode where o is near zero)
    mean_abs: float       # mean |q - o|
    cosine: float         # <o, q> / (|o| |q|) over the flattened output
    finite: bool          # no NaN / Inf in the quantized output

    def passes(self, min_cosine: float | None) -> bool:
        return self.finite and (min_cosine is None or self.cosine >= min_cosine)


@dataclass
class CompareReport:
    original: str
    quantized: str
    via: str                                   # how the quantized model ran
    input_shapes: dict[str, tuple]
    seed: int
    min_cosine: float | None = None
    outputs: list[OutputComparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """False when an output is not finite or, with ``min_cosine`` given, an output's cosine is below it."""
        return bool(self.outputs) and all(o.passes(self.min_cosine) for o in self.outputs)

    def format(self) -> str:
        shapes = ", ".join(f"{k} {list(v)}" for k, v in self.input_shapes.items())
        lines = [f"compare: {self.original} vs {self.quantized}",
                 f"  quantized model run as: {self.via}",
                 f"  inputs (seed {self.seed}): {shapes}", ""]
        header = f"  {'output':<24} {'shape':<18} {'max abs err':>12} {'max rel err':>12} {'mean abs err':>12} " \
                 f"{'cosine':>10}"
        lines += [header, "  " + "-" * (len(header) - 2)]
        for o in self.outputs:
            cos = f"{o.cosine:.6f}" if o.finite else "non-finite"
            mark = "" if o.passes(self.min_cosine) else "  <- below --min-cosine" if o.finite else "  <- NaN/Inf"
            lines.append(f"  {o.name:<24} {str(list(o.shape)):<18} {o.max_abs:>12.4g} {o.max_rel:>12.4g} "
                         f"{o.mean_abs:>12.4g} {cos:>10}{mark}")
        lines.append("")
        if self.min_cosine is not None:
            lines.append(f"  required cosine >= {self.min_cosine}")
        lines.append("PASSED" if self.passed else "FAILED")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"original": self.original, "quantized": self.quantized, "via": self.via, "seed": self.seed,
                "input_shapes": {k: list(v) for k, v in self.input_shapes.items()}, "min_cosine": self.min_cosine,
                "passed": self.passed,
                "outputs": [{"name": o.name, "shape": list(o.shape), "max_abs": o.max_abs, "max_rel": o.max_rel,
                             "mean_abs": o.mean_abs, "cosine": o.cosine, "finite": o.finite} for o in self.outputs]}


def compare_arrays(name: str, original: np.ndarray, quantized: np.ndarray) -> OutputComparison:
    """The error figures of one output pair (float64 math)."""
    o = np.asarray(original, dtype=np.float64)
    q = np.asarray(quantized, dtype=np.float64)
    if o.shape != q.shape:
        raise UserError(f"output {name}: shapes differ, original {o.shape} vs quantized {q.shape}")
    finite = bool(np.isfinite(q).all())
    if not np.isfinite(o).all():
        raise UserError(f"output {name}: the ORIGINAL model produced NaN/Inf on the generated inputs; give other "
                        f"input shapes or check the model")
    if not finite or o.size == 0:
        return OutputComparison(name, o.shape, float("inf"), float("inf"), float("inf"), float("nan"), finite)
    diff = np.abs(q - o)
    ref_max = float(np.abs(o).max())
    denom = float(np.linalg.norm(o) * np.linalg.norm(q))
    cosine = float(np.dot(o.ravel(), q.ravel()) / denom) if denom > 0 else (1.0 if diff.max() == 0 else 0.0)
    return OutputComparison(name, o.shape, float(diff.max()), float(diff.max() / ref_max) if ref_max > 0 else
                            float(diff.max()), float(diff.mean()), cosine, finite)


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


def has_plugin_nodes(model) -> bool:
    return any(n.op_type == OP_TYPE and n.domain == DOMAIN for n in model.graph.node)


def plugin_to_qdq(model):
    """A copy of ``model`` where every WeightOnlyLinear node is DequantizeLinear + MatMul (+ Add bias).

    The integer weights are unpacked from the node's packed initializer, so the twin computes with exactly the
    values the plugin reads. Needs default-domain opset >= 21 (the quantizer writes 21); an older model is refused
    with a message rather than silently converted.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset < QDQ_OPSET:
        raise UserError(f"the quantized model imports ONNX opset {opset}; its Q/DQ twin needs opset >= {QDQ_OPSET} "
                        f"(blocked DequantizeLinear). Re-run the quantizer, which writes opset {QDQ_OPSET}")
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    graph = twin.graph
    inits = {t.name: t for t in graph.initializer}
    used_by_other = {i for n in graph.node if not (n.op_type == OP_TYPE and n.domain == DOMAIN) for i in n.input}
    new_nodes, new_inits, drop = [], [], set()
    for node in graph.node:
        if not (node.op_type == OP_TYPE and node.domain == DOMAIN):
            new_nodes.append(node)
            continue
        name = node.name or node.output[0]
        a = _attrs(node)
        try:
            bits, group, k, n = int(a["bits"]), int(a["group_size"]), int(a["in_features"]), int(a["out_features"])
            has_zeros, has_bias, layout = int(a.get("has_zeros", 0)), int(a.get("has_bias", 0)), int(a["layout"])
            act_quant, act_asym = int(a.get("act_mode", 0)) != 0, int(a.get("act_asymmetric", 0))
        except KeyError as exc:
            raise UserError(f"{OP_TYPE} node {name}: missing attribute {exc}") from None
        expected = 3 + has_zeros + has_bias + act_asym
        if len(node.input) != expected:
            raise UserError(f"{OP_TYPE} node {name}: {len(node.input)} inputs, expected {expected} for "
                            f"has_zeros={has_zeros}, has_bias={has_bias}, act_asymmetric={act_asym}")
        consts = []
        for i in node.input[1:]:
            if i not in inits:
                raise UserError(f"{OP_TYPE} node {name}: input {i} is not an initializer; only constant weights "
                                f"can be turned into a Q/DQ twin")
            consts.append(numpy_helper.to_array(inits[i], base_dir=""))
        packed, scales = consts[0], consts[1]
        zeros = consts[2] if has_zeros else None
        bias = consts[2 + has_zeros] if has_bias else None
        u = get_layout(layout).unpack(packed, k, n, bits)  # uint8 [K, N]
        groups = 1 if group == -1 else k // group
        scales = scales.reshape(groups, n)
        act_dtype = scales.dtype
        # ORT's CPU kernels have no bf16 DequantizeLinear / MatMul: compute a bf16 node in float32 between Casts.
        compute_dtype = np.dtype(np.float32) if act_dtype.name == "bfloat16" or act_quant else act_dtype
        if compute_dtype != act_dtype:
            scales = scales.astype(np.float32)
        z = (np.full((groups, n), 1 << (bits - 1), np.uint8) if zeros is None
             else np.asarray(zeros.reshape(groups, n), np.float64).round().astype(np.uint8))
        p = f"{name}.qdq"
        u_name, s_name, z_name = f"{p}.weight_q", f"{p}.scale", f"{p}.zero_point"
        if group == -1:  # per output channel: per-axis DequantizeLinear on axis 1 (N)
            scales, z, dq_attrs = scales.reshape(n), z.reshape(n), {"axis": 1}
        else:
            dq_attrs = {"axis": 0, "block_size": group}
        new_inits += [_int_tensor(u_name, u, bits), numpy_helper.from_array(scales, s_name),
                      _int_tensor(z_name, z, bits)]
        x = node.input[0]
        if compute_dtype != act_dtype:
            new_nodes.append(helper.make_node("Cast", [x], [f"{p}.x_f32"], name=f"{p}.cast_x", to=TensorProto.FLOAT))
            x = f"{p}.x_f32"
        if act_quant:
            act_nodes, act_inits, x = _act_quant_emulation(p, x, k, k if group == -1 else group, bool(act_asym))
            new_nodes += act_nodes
            new_inits += act_inits
        new_nodes.append(helper.make_node("DequantizeLinear", [u_name, s_name, z_name], [f"{p}.weight"],
                                          name=f"{p}.dequantize", **dq_attrs))
        out = node.output[0]
        mm_out = out if (bias is None and compute_dtype == act_dtype) else f"{p}.matmul_out"
        new_nodes.append(helper.make_node("MatMul", [x, f"{p}.weight"], [mm_out], name=f"{p}.matmul"))
        if bias is not None:
            b_name = f"{p}.bias"
            new_inits.append(numpy_helper.from_array(bias.astype(compute_dtype), b_name))
            add_out = out if compute_dtype == act_dtype else f"{p}.add_out"
            new_nodes.append(helper.make_node("Add", [mm_out, b_name], [add_out], name=f"{p}.add_bias"))
            mm_out = add_out
        if compute_dtype != act_dtype:
            new_nodes.append(helper.make_node("Cast", [mm_out], [out], name=f"{p}.cast_y",
                                              to=helper.np_dtype_to_tensor_dtype(act_dtype)))
        drop.update(i for i in node.input[1:] if i not in used_by_other)
    del graph.node[:]
    graph.node.extend(new_nodes)
    kept = [t for t in graph.initializer if t.name not in drop]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    if not any(nd.domain == DOMAIN for nd in graph.node):
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


# ---------------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------------

def _np_dtype(elem_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _gather_rows(model, input_name: str) -> int | None:
    """Rows of the constant table that ``input_name`` indexes through a Gather (axis 0), if it does."""
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == input_name \
                and node.input[0] in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            return int(inits[node.input[0]].dims[axis])
    return None


def make_inputs(model, input_shapes: dict | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """One feed dict for ``model``'s graph inputs (initializers excluded), as described in the module docstring."""
    input_shapes = {k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()}
    init_names = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in init_names]
    unknown = set(input_shapes) - {i.name for i in graph_inputs}
    if unknown:
        raise UserError(f"--input-shapes names {', '.join(sorted(unknown))}, which the model does not have; its "
                        f"inputs are {', '.join(i.name for i in graph_inputs)}")
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in graph_inputs:
        tt = inp.type.tensor_type
        dtype = _np_dtype(tt.elem_type)
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if inp.name in input_shapes:
            shape = input_shapes[inp.name]
            if len(shape) != len(dims) or any(d is not None and d != s for d, s in zip(dims, shape)):
                raise UserError(f"input {inp.name}: shape {list(shape)} does not match the model's "
                                f"{['?' if d is None else d for d in dims]}")
        else:
            shape = tuple(d if d is not None else (DEFAULT_BATCH if i == 0 else DEFAULT_DYNAMIC_DIM)
                          for i, d in enumerate(dims))
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[inp.name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            high = _gather_rows(model, inp.name) or 16
            feeds[inp.name] = rng.integers(0, high, shape).astype(dtype)
        else:
            raise UserError(f"input {inp.name}: cannot generate data of type {dtype}; give the inputs another way")
    return feeds


# ---------------------------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------------------------

def _load(path: str, external_data: bool = False):
    """The model; weights stored as external data are read only when asked (the graph and dims are enough unless a
    Q/DQ twin has to be built), which keeps memory down for big models: ONNX Runtime reads the files itself."""
    import onnx

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: no such file")
    try:
        return onnx.load(str(p), load_external_data=external_data)
    except Exception as exc:  # onnx raises DecodeError, OSError, ... for a file that is not ONNX
        raise UserError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None


def _session(model_path: str, name: str):
    import onnxruntime as ort
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    loader = SessionFromOnnx(model_path, providers=["CPUExecutionProvider"],
                             graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    return OnnxrtRunner(loader, name=name)


def compare(original_path, quantized_path, *, input_shapes: dict | None = None, seed: int = 0,
            min_cosine: float | None = None, use_trt: bool = False) -> CompareReport:
    """Run both models on the same generated inputs and compare every output (see the module docstring)."""
    original_path, quantized_path = str(original_path), str(quantized_path)
    if use_trt:
        try:
            from trt_woq.compare import compare_trt
            from trt_woq.errors import TrtWoqError
        except ImportError as exc:
            raise UserError(f"--trt needs TensorRT and the trt_woq plugin runtime ({exc}); drop --trt to compare "
                            f"with ONNX Runtime") from None
        try:
            return compare_trt(original_path, quantized_path, input_shapes=input_shapes, seed=seed,
                               min_cosine=min_cosine)
        except TrtWoqError as exc:  # missing TensorRT / plugin library, failed build: the message says what to do
            raise UserError(str(exc)) from None
    if min_cosine is not None and not (-1.0 <= min_cosine <= 1.0):
        raise UserError(f"min_cosine {min_cosine} is not in [-1, 1]")
    try:
        import onnxruntime  # noqa: F401
        from polygraphy.comparator import Comparator
    except ImportError as exc:
        raise UserError(f"compare needs polygraphy and onnxruntime: pip install polygraphy onnxruntime ({exc})") \
            from None

    original = _load(original_path)
    quantized = _load(quantized_path)
    feeds = make_inputs(original, input_shapes, seed)
    q_inputs = {i.name for i in quantized.graph.input} - {t.name for t in quantized.graph.initializer}
    if q_inputs != set(feeds):
        raise UserError(f"the models have different inputs: {sorted(feeds)} vs {sorted(q_inputs)}")

    with tempfile.TemporaryDirectory(prefix="trt_woq_compare_") as tmp:
        run_paths, via = {}, "onnxruntime (CPU)"
        for role, path, model in (("original", original_path, original), ("quantized", quantized_path, quantized)):
            run_paths[role] = path
            if has_plugin_nodes(model):
                import onnx

                twin = plugin_to_qdq(_load(path, external_data=True))
                run_paths[role] = os.path.join(tmp, f"{role}_qdq_twin.onnx")
                # External data keeps models over 2 GB saveable; ORT reads it from beside the file.
                onnx.save(twin, run_paths[role], save_as_external_data=True, location=f"{role}_qdq_twin.onnx.data")
                del twin
                via = "onnxruntime (CPU), plugin nodes replaced by their Q/DQ twin (DequantizeLinear + MatMul)"
        del quantized
        runners = [_session(run_paths["original"], "original"), _session(run_paths["quantized"], "quantized")]
        try:
            from polygraphy.logger import G_LOGGER

            with G_LOGGER.verbosity(G_LOGGER.WARNING):
                results = Comparator.run(runners, data_loader=[feeds])
        except Exception as exc:  # polygraphy wraps runner failures; keep the message, drop the traceback
            raise UserError(f"running the models failed: {exc}") from None
    o_out = results["original"][0]
    q_out = results["quantized"][0]
    report = CompareReport(original_path, quantized_path, via, {k: v.shape for k, v in feeds.items()}, seed,
                           min_cosine)
    for out in original.graph.output:
        if out.name not in q_out:
            raise UserError(f"output {out.name} of the original model is missing from the quantized model")
        report.outputs.append(compare_arrays(out.name, o_out[out.name], q_out[out.name]))
    return report
