"""Write the inputs of the plugin conformance harness (plugin_conformance.cpp).

Each case is one plugin node, WeightOnlyLinear or WeightOnlyConv, made by the op contract's node builder
(``graph_passes.op.make_onnx_node``) or read from a quantized model, and written as the harness reads it:

* ``--op linear`` (default), ``--synthetic`` (default when no model is given): the matrix the WeightOnlyLinear plugin
  must pass, built with each format's packer from fresh random values: weight-only INT8 per-channel, INT4
  per-channel, INT4 g128, INT4 g128 asymmetric, FP6 per-channel, FP6 g128; W8A8 (``act_mode`` 1) symmetric and
  asymmetric activations, per-channel and grouped INT8 weights; each for fp16 and bf16, some with bias.
* ``--op conv``: the WeightOnlyConv matrix: 1x1 / 3x3 / 7x7, odd heights and widths, symmetric and asymmetric
  padding, stride 2, dilation 2; INT8 / INT4 per channel and g128 (INT4 g128 also asymmetric); fp16 and bf16; bias
  on some; the fused activations cycling so that every format meets several and every one is met; the packed K
  order (``k_order``) alternating between (c, i, j) and (i, j, c).
* ``--model FILE.onnx`` (repeatable): every WeightOnlyLinear / WeightOnlyConv node of a quantized model
  (``python -m graph_passes quantize`` output), with its initializers and its activation dtype.

Per case ``DIR/NAME.case`` (text) says: the plugin; the activation type; every node attribute with its ONNX type
(``attr INT bits 8``, ``attr INTS pads 1 1 1 1``, ``attr FLOAT clip_min -0.5``, ``attr STRING plugin_version 1``), so
that the harness builds the fields exactly as TensorRT's ONNX parser does; each constant input in node order
(``input i32 160x512``, data in ``NAME.in<position>``); the float64 weight ``W[K, N]`` of the op's math
(``wref K N``, data in ``NAME.wref.f64``: ``(U - Z) * S`` or ``fp6(C) * S``, exact); which activation axis is a
build-time constant (``xconst``: -1 = the last, K; 1 = C of NCHW); the optimization profiles (``profile need|any MIN
OPT MAX``: ``need`` = at least one tactic expected) and the activation shapes to run in each (``run X Y float|w8a8``:
which math the output follows, below); on some cases, invalid field sets the creator must refuse (``invalid TEXT``
then ``set`` / ``drop`` / ``as_float`` lines). ``DIR/cases.txt`` lists the names.

W8A8 nodes run at M <= 16 as the INT8 weight-only GEMV (docs/op.md, W8A8; docs/kernels_w8a8.md), so their outputs
there follow ``X @ W``; above, the W8A8 math (activations quantized per row block). Their profiles split at that M, as
the kernel candidates do, plus one profile spanning both that runs with the default tactic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from graph_passes import op as woq_op  # noqa: E402
from graph_passes import op_conv  # noqa: E402
from graph_passes.registry.act_modes import ACT_MODES  # noqa: E402
from graph_passes.registry.epilogues import EPILOGUES  # noqa: E402
from graph_passes.registry.formats import format_by_bits  # noqa: E402

W8A8_GEMV_MAX_M = 16  # docs/op.md, W8A8: "At M <= 16 the kernels run the INT8 weight-only GEMV instead"
LINEAR_M = (1, 3, 16, 127, 4096)  # the last as a 3-D activation [2, 2048, K] (--max-m)
CLIP = {"clip_min": -0.5, "clip_max": 0.75}
W8A8 = ACT_MODES.get("w8a8").c_enum


def to_bits(x: np.ndarray, act: str) -> np.ndarray:
    """float values -> uint16 storage bits of fp16 or bf16 (round to nearest even)."""
    if act == "fp16":
        return np.asarray(x, np.float32).astype(np.float16).view(np.uint16)
    f = np.ascontiguousarray(np.asarray(x, np.float32)).view(np.uint32).astype(np.uint64)
    rounded = (f + 0x7FFF + ((f >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bits(b: np.ndarray, act: str) -> np.ndarray:
    """uint16 storage bits -> float64 values."""
    b = np.asarray(b, np.uint16)
    if act == "fp16":
        return b.view(np.float16).astype(np.float64)
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# ------------------------------------------------------------------------------------------------ tensors
def _act_of(t) -> str:
    import onnx

    kinds = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}
    if t.data_type not in kinds:
        raise ValueError(f"{t.name}: expected fp16/bf16 data, got data type {t.data_type}")
    return kinds[t.data_type]


def _raw_u16(t) -> np.ndarray:
    _act_of(t)
    if t.raw_data:
        return np.frombuffer(t.raw_data, np.uint16).copy()
    return np.asarray(t.int32_data, np.uint16)


def _u16_tensor(name: str, bits: np.ndarray, act: str):
    import onnx

    kind = onnx.TensorProto.FLOAT16 if act == "fp16" else onnx.TensorProto.BFLOAT16
    bits = np.ascontiguousarray(bits, np.uint16)
    return onnx.helper.make_tensor(name, kind, list(bits.shape), bits.tobytes(), raw=True)


def _i32_tensor(name: str, values: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(np.ascontiguousarray(values, np.int32), name)


# ------------------------------------------------------------------------------------------------ profiles
def dims(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def linear_profiles(k: int, n: int, act_mode: int, max_m: int = LINEAR_M[-1]) -> list[str]:
    """Profile and run lines of a WeightOnlyLinear node: M of LINEAR_M below ``max_m``, then ``max_m`` as a 3-D
    activation [2, max_m / 2, K]."""
    def run(shape, math):
        return f"run {dims(shape)} {dims((*shape[:-1], n))} {math}"

    big = (2, max_m // 2, k)
    if act_mode == 0:
        shapes = [(1, m, k) for m in LINEAR_M if m < max_m] + [big]
        return [f"profile need 1x1x{k} 1x{min(64, max_m // 2)}x{k} {dims(big)}"] + [run(s, "float") for s in shapes]
    small = W8A8_GEMV_MAX_M
    return ([f"profile need 1x{k} 8x{k} {small}x{k}"] + [run((m, k), "float") for m in (1, 3, small)]
            + [f"profile need 1x{small + 1}x{k} 1x{small + 1}x{k} {dims(big)}"]
            + [run((1, m, k), "w8a8") for m in (small + 1, 127, 333) if m < max_m] + [run(big, "w8a8")]
            + [f"profile any 1x1x{k} 1x{small}x{k} {dims(big)}", run((1, small, k), "float"),
               run((1, small + 1, k), "w8a8")])


def conv_profiles(attrs: op_conv.ConvAttributes, batches_hw) -> list[str]:
    """Profile and run lines of a WeightOnlyConv node for inputs (batch, H, W); one profile spanning them all."""
    c, n = attrs.in_channels, attrs.out_features
    shapes = [(b, c, h, w) for b, h, w in batches_hw]
    lo = tuple(min(s[i] for s in shapes) for i in range(4))
    hi = tuple(max(s[i] for s in shapes) for i in range(4))
    lines = [f"profile any {dims(lo)} {dims(shapes[0])} {dims(hi)}"]
    for b, _, h, w in shapes:
        oh, ow = attrs.output_hw(h, w)
        lines.append(f"run {dims((b, c, h, w))} {dims((b, n, oh, ow))} float")
    return lines


def default_conv_inputs(attrs: op_conv.ConvAttributes):
    """Two odd-sized inputs the node's kernel fits (model nodes carry no input size)."""
    (kh, kw), (dh, dw), (top, left, bottom, right) = attrs.kernel_shape, attrs.dilations, attrs.pads
    h = max(dh * (kh - 1) + 1 - top - bottom, 1) + 8
    w = max(dw * (kw - 1) + 1 - left - right, 1) + 6
    return [(1, h | 1, w | 1), (2, (h + 3) | 1, (w + 5) | 1)]


# ------------------------------------------------------------------------------------------------ one case
def node_case(out: Path, name: str, node, inits: dict, profiles: list[str], invalid: list[str] = ()) -> str:
    """Write NAME.case and its data for ``node`` (an onnx.NodeProto) whose constant inputs are in ``inits``."""
    import onnx
    from onnx import numpy_helper

    kinds = {onnx.AttributeProto.INT: "INT", onnx.AttributeProto.INTS: "INTS", onnx.AttributeProto.FLOAT: "FLOAT",
             onnx.AttributeProto.STRING: "STRING"}
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    attrs_cls = op_conv.ConvAttributes if node.op_type == op_conv.OP_TYPE else woq_op.WoqAttributes
    attrs = attrs_cls.from_dict({k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()})
    act = _act_of(inits[node.input[2]])
    lines = [f"plugin {node.op_type}", f"act {act}"]
    for a in node.attribute:
        v = values[a.name]
        text = v.decode() if isinstance(v, bytes) else " ".join(map(str, v)) if isinstance(v, list) else repr(v)
        lines.append(f"attr {kinds[a.type]} {a.name} {text}".rstrip())
    arrays = {}
    for pos, input_name in enumerate(node.input[1:], start=1):
        t = inits[input_name]
        if t.data_type == onnx.TensorProto.INT32:
            data, kind = numpy_helper.to_array(t).astype(np.int32), "i32"
        else:
            data, kind = _raw_u16(t).reshape(tuple(t.dims)), "act"
        arrays[pos] = data
        np.ascontiguousarray(data).tofile(out / f"{name}.in{pos}")
        lines.append(f"input {kind} {dims(t.dims)}")
    k, n = attrs.in_features, attrs.out_features
    positions = attrs.input_positions()
    scales = from_bits(arrays[positions["scales"]], act).reshape(-1, n)
    zeros = from_bits(arrays[positions["zeros"]], act).reshape(-1, n) if "zeros" in positions else None
    wref = attrs.weight_format.dequantize(arrays[positions["packed_weight"]], scales, zeros, k, n, attrs.group_size)
    np.ascontiguousarray(wref, np.float64).tofile(out / f"{name}.wref.f64")
    lines += [f"wref {k} {n}", f"xconst {1 if attrs_cls is op_conv.ConvAttributes else -1}", *profiles, *invalid]
    (out / f"{name}.case").write_text("\n".join(lines) + "\n")
    return name


# ------------------------------------------------------------------------------------------------ invalid fields
def _bad(expect: str, *changes: str) -> list[str]:
    return [f"invalid {expect}", *changes]


LINEAR_INVALID = (  # on an INT4 g128 symmetric node
    _bad("group_size 96", "set INT group_size 96") + _bad("bits 3", "set INT bits 3")
    + _bad("layout 2", "set INT layout 2") + _bad("in_features 100", "set INT in_features 100")
    + _bad("out_features 6", "set INT out_features 6") + _bad("has_zeros 2", "set INT has_zeros 2")
    + _bad("activation 7", "set INT activation 7")
    + _bad("clip_min 1", "set INT activation 2", "set FLOAT clip_min 1.0", "set FLOAT clip_max 0.0")
    + _bad("act_mode 2", "set INT act_mode 2") + _bad("got bits 4", "set INT act_mode 1")
    + _bad("act_asymmetric 1", "set INT act_asymmetric 1") + _bad("in_features", "drop in_features")
    + _bad("bits", "as_float bits") + _bad('"2"', "set STRING plugin_version 2"))

CONV_INVALID = (  # on the first conv case (INT8 per channel, 128 input channels)
    _bad("kernel_shape", "set INTS kernel_shape 3 3 3") + _bad("strides [0, 1]", "set INTS strides 0 1")
    + _bad("pads >= 0", "set INTS pads -1 0 0 0") + _bad("in_features 1024", "set INT in_features 1024")
    + _bad("bits 3", "set INT bits 3") + _bad("bits 6", "set INT bits 6", "set INT layout 2")
    + _bad("kernel_shape", "drop kernel_shape") + _bad("in_channels", "as_float in_channels"))


# ------------------------------------------------------------------------------------------------ synthetic
class SyntheticConfig(NamedTuple):
    bits: int
    group_size: int
    asymmetric: bool
    bias: bool
    act_mode: int = 0
    act_asymmetric: bool = False


# The synthetic linear matrix; tests/plugins/kernels/test_registry_walk.py checks that the harness covers every
# (weight format, activation mode, op, epilogue) a kernel candidate claims (see synthetic_combinations).
SYNTHETIC_CONFIGS = (SyntheticConfig(8, -1, False, True), SyntheticConfig(4, -1, False, False),
                     SyntheticConfig(4, 128, False, True), SyntheticConfig(4, 128, True, False),
                     SyntheticConfig(6, -1, False, True), SyntheticConfig(6, 128, False, False),
                     SyntheticConfig(8, -1, False, True, W8A8), SyntheticConfig(8, -1, False, False, W8A8, True),
                     SyntheticConfig(8, 128, False, False, W8A8), SyntheticConfig(8, 128, False, True, W8A8, True),
                     SyntheticConfig(8, 64, False, False, W8A8, True))


class ConvGeometry(NamedTuple):
    in_channels: int
    out_channels: int
    kernel: int
    stride: int
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    dilation: int
    inputs: tuple[tuple[int, int, int], ...]  # (batch, H, W) run in one profile


CONV_GEOMETRIES = (
    ConvGeometry(128, 36, 1, 1, (0, 0, 0, 0), 1, ((1, 7, 5), (3, 9, 11))),
    ConvGeometry(128, 20, 3, 1, (1, 1, 1, 1), 1, ((2, 9, 11), (1, 5, 3))),
    ConvGeometry(128, 24, 3, 2, (1, 0, 2, 1), 1, ((1, 13, 9), (2, 8, 15))),
    ConvGeometry(128, 16, 3, 1, (2, 2, 2, 2), 2, ((2, 11, 12), (1, 7, 7))),
    ConvGeometry(128, 32, 7, 2, (3, 3, 3, 3), 1, ((1, 15, 13), (2, 9, 9))),
)
CONV_FORMATS = ((8, -1, False), (8, 128, False), (4, -1, False), (4, 128, False), (4, 128, True))


def synthetic_combinations() -> set[tuple[str, str, str, str]]:
    """(weight format, activation mode, op, epilogue) names, as kernels.h's enums, that the synthetic cases run with
    every tactic: WeightOnlyLinear nodes without a fused activation, weight-only and W8A8, and WeightOnlyConv nodes
    with every epilogue on INT8 and INT4."""
    names = {8: "int8", 4: "int4", 6: "fp6_e3m2"}
    modes = {m.c_enum: m.c_name.removeprefix("TRT_WOQ_ACT_MODE_").lower() for m in ACT_MODES}
    linear = {(names[c.bits], modes[c.act_mode], "linear", "none") for c in SYNTHETIC_CONFIGS}
    conv = {(names[bits], "weight_only", "conv2d", ep.name) for bits, _, _ in CONV_FORMATS for ep in EPILOGUES}
    return linear | conv


def random_weights(rng: np.random.Generator, bits: int, g: int, asym: bool, k: int, n: int, act: str, bias: bool):
    """(codes U [K, N], scale bits, zero bits or None, bias bits or None) of a typical weight, fresh random."""
    fmt = format_by_bits(bits)
    groups = 1 if g == -1 else k // g
    u = rng.integers(0, 1 << bits, size=(k, n), dtype=np.int64).astype(np.uint8)  # FP6: all 64 codes
    # Scales of a typical weight (|w| ~ 0.02 .. 0.1) spread over columns and groups; never zero.
    top = 28.0 if fmt.qdq is None else 1 << (bits - 1)  # the largest code magnitude (FP6: 28)
    scales = to_bits(rng.uniform(0.5, 2.0, size=(groups, n)) * (0.05 / top), act)
    zeros = to_bits(rng.integers(0, 1 << bits, size=(groups, n)).astype(np.float32), act) if asym else None
    bias_bits = to_bits(rng.normal(0.0, 0.5, size=n), act) if bias else None
    return u, scales, zeros, bias_bits


def node_and_inits(name: str, attrs, u: np.ndarray, scales, zeros, bias, act: str):
    fmt = attrs.weight_format
    inits = {f"{name}.w": _i32_tensor(f"{name}.w", fmt.pack(u)), f"{name}.s": _u16_tensor(f"{name}.s", scales, act)}
    if zeros is not None:
        inits[f"{name}.z"] = _u16_tensor(f"{name}.z", zeros, act)
    if bias is not None:
        inits[f"{name}.b"] = _u16_tensor(f"{name}.b", bias, act)
    if attrs.act_asymmetric:
        sums = woq_op.weight_sums_of(u, attrs.bits, attrs.group_size)
        inits[f"{name}.ws"] = _i32_tensor(f"{name}.ws", sums)
    node = woq_op.make_onnx_node(["x", *inits], ["y"], attrs, name)
    return node, inits


def synthetic_linear(out: Path, rng: np.random.Generator, k: int, n: int, max_m: int) -> list[str]:
    names = []
    for act in ("fp16", "bf16"):
        for c in SYNTHETIC_CONFIGS:
            fmt = format_by_bits(c.bits)
            u, scales, zeros, bias = random_weights(rng, c.bits, c.group_size, c.asymmetric, k, n, act, c.bias)
            mode = f"_w8a8{'a' if c.act_asymmetric else 's'}" if c.act_mode else ""
            name = (f"{fmt.name}{mode}_{'pc' if c.group_size == -1 else f'g{c.group_size}'}"
                    f"{'_asym' if c.asymmetric else ''}{'_bias' if c.bias else ''}_{act}")
            attrs = woq_op.WoqAttributes(bits=c.bits, group_size=c.group_size, in_features=k, out_features=n,
                                         layout=fmt.layout.VERSION, has_zeros=int(c.asymmetric), has_bias=int(c.bias),
                                         act_mode=c.act_mode, act_asymmetric=int(c.act_asymmetric))
            node, inits = node_and_inits(name, attrs, u, scales, zeros, bias, act)
            invalid = LINEAR_INVALID if (c.bits, c.group_size, c.asymmetric, act) == (4, 128, False, "fp16") else ()
            names.append(node_case(out, name, node, inits, linear_profiles(k, n, c.act_mode, max_m), invalid))
    return names


def synthetic_conv(out: Path, rng: np.random.Generator) -> list[str]:
    names = []
    eps = list(EPILOGUES)
    i = 0
    for geo in CONV_GEOMETRIES:
        k = geo.in_channels * geo.kernel * geo.kernel
        for act in ("fp16", "bf16"):
            for bits, g, asym in CONV_FORMATS:
                ep = eps[i % len(eps)]
                i += 1
                with_bias = i % 3 != 0
                u, scales, zeros, bias = random_weights(rng, bits, g, asym, k, geo.out_channels, act, with_bias)
                attrs = op_conv.ConvAttributes(
                    bits=bits, group_size=g, in_features=k, out_features=geo.out_channels, layout=1,
                    has_zeros=int(asym), has_bias=int(with_bias), in_channels=geo.in_channels,
                    kernel_shape=(geo.kernel, geo.kernel), strides=(geo.stride, geo.stride), pads=geo.pads,
                    dilations=(geo.dilation, geo.dilation), k_order=i % 2)  # both K orders on every geometry
                attrs = attrs.with_epilogue(ep, **(CLIP if ep.params else {}))
                name = (f"conv{geo.kernel}x{geo.kernel}_s{geo.stride}_d{geo.dilation}_{format_by_bits(bits).name}_"
                        f"{'pc' if g == -1 else f'g{g}'}{'_asym' if asym else ''}{'_bias' if with_bias else ''}_"
                        f"{ep.name}_{act}_k{op_conv.K_ORDERS[attrs.k_order].replace(', ', '')[1:-1]}")
                node, inits = node_and_inits(name, attrs, u, scales, zeros, bias, act)
                invalid = CONV_INVALID if not names else ()
                names.append(node_case(out, name, node, inits, conv_profiles(attrs, geo.inputs), invalid))
    return names


def model_cases(out: Path, model_path: Path, prefix: str, max_m: int = LINEAR_M[-1]) -> list[str]:
    import onnx

    model = onnx.load(str(model_path))
    inits = {t.name: t for t in model.graph.initializer}
    names = []
    for idx, node in enumerate(model.graph.node):
        if node.op_type not in (woq_op.OP_TYPE, op_conv.OP_TYPE):
            continue
        name = f"{prefix}{idx}_" + "".join(c if c.isalnum() else "_" for c in (node.name or "node"))[:60]
        values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == op_conv.OP_TYPE:
            attrs = op_conv.ConvAttributes.from_dict(values)
            profiles = conv_profiles(attrs, default_conv_inputs(attrs))
        else:
            profiles = linear_profiles(int(values["in_features"]), int(values["out_features"]),
                                       int(values.get("act_mode", 0)), max_m)
        names.append(node_case(out, name, node, inits, profiles))
    if not names:
        raise SystemExit(f"{model_path}: no WeightOnlyLinear or WeightOnlyConv node (quantize it with "
                         f"`python -m graph_passes quantize`)")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--op", choices=("linear", "conv"), default="linear", help="which synthetic matrix")
    ap.add_argument("--model", type=Path, action="append", default=[], help="quantized ONNX model (repeatable)")
    ap.add_argument("--synthetic", action="store_true", help="also the synthetic matrix (default without --model)")
    ap.add_argument("-k", type=int, default=1024, help="in_features of the synthetic linear cases")
    ap.add_argument("-n", type=int, default=320, help="out_features of the synthetic linear cases")
    ap.add_argument("--max-m", type=int, default=LINEAR_M[-1],
                    help="largest M of the linear cases, run as [2, M/2, K] (even, > 17; smaller for memcheck)")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: fresh each run)")
    args = ap.parse_args(argv)
    if args.max_m % 2 or args.max_m <= W8A8_GEMV_MAX_M + 1:
        ap.error(f"--max-m must be even and above {W8A8_GEMV_MAX_M + 1}, got {args.max_m}")
    args.out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 32))
    rng = np.random.default_rng(seed)
    names = []
    if args.synthetic or not args.model:
        if args.op == "conv":
            names += synthetic_conv(args.out, rng)
        else:
            names += synthetic_linear(args.out, rng, args.k, args.n, args.max_m)
    for i, m in enumerate(args.model):
        names += model_cases(args.out, m, f"m{i}_", args.max_m)
    (args.out / "cases.txt").write_text("\n".join(names) + "\n")
    print(f"make_cases: {len(names)} cases in {args.out} (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
