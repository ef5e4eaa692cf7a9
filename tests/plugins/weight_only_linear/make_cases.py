"""Write the inputs of the WeightOnlyLinear conformance harness (weight_only_linear_conformance.cpp).

Each case is one WeightOnlyLinear node: its INT attributes, its constant inputs (packed weight, scales, zeros, bias)
as raw little-endian files, and the float64 dequantized weight W[K, N] that the harness multiplies by its own random
activations for the reference. Cases come from

* ``--model FILE.onnx`` (repeatable): every WeightOnlyLinear node of a quantized model (``python -m graph_passes
  quantize`` output), with its initializers, run with the node's activation dtype; and
* ``--synthetic`` (default when no model is given): the matrix the plugin must pass, built with
  each format's packer (``graph_passes.registry.formats``) from fresh random values: INT8 per-channel, INT4
  per-channel, INT4 g128, INT4 g128 asymmetric, FP6 per-channel, FP6 g128, each for fp16 and bf16, some with bias.

Output: ``DIR/cases.txt`` (one line per case: ``name bits group_size in_features out_features layout has_zeros
has_bias act``) and ``DIR/<name>.{weight.i32, scales.u16, zeros.u16, bias.u16, wref.f64}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from graph_passes.registry.formats import format_by_bits  # noqa: E402

INT_ATTRS = ("bits", "group_size", "in_features", "out_features", "layout", "has_zeros", "has_bias")


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


def write_case(out: Path, name: str, attrs: dict, act: str, packed: np.ndarray, scales_bits: np.ndarray,
               zeros_bits: np.ndarray | None, bias_bits: np.ndarray | None) -> str:
    k, n, bits, g = attrs["in_features"], attrs["out_features"], attrs["bits"], attrs["group_size"]
    scales = from_bits(scales_bits, act).reshape(-1, n)
    zeros = None if zeros_bits is None else from_bits(zeros_bits, act).reshape(-1, n)
    wref = format_by_bits(bits).dequantize(packed, scales, zeros, k, n, g)
    np.ascontiguousarray(packed, np.int32).tofile(out / f"{name}.weight.i32")
    np.ascontiguousarray(scales_bits, np.uint16).tofile(out / f"{name}.scales.u16")
    if zeros_bits is not None:
        np.ascontiguousarray(zeros_bits, np.uint16).tofile(out / f"{name}.zeros.u16")
    if bias_bits is not None:
        np.ascontiguousarray(bias_bits, np.uint16).tofile(out / f"{name}.bias.u16")
    np.ascontiguousarray(wref, np.float64).tofile(out / f"{name}.wref.f64")
    return " ".join([name] + [str(attrs[a]) for a in INT_ATTRS] + [act])


class SyntheticConfig(NamedTuple):
    bits: int
    group_size: int
    asymmetric: bool
    bias: bool


# The synthetic matrix; tests/plugins/kernels/test_registry_walk.py checks that it covers every (weight format,
# activation mode, op, epilogue) a kernel candidate claims (see synthetic_combinations).
SYNTHETIC_CONFIGS = (SyntheticConfig(8, -1, False, True), SyntheticConfig(4, -1, False, False),
                     SyntheticConfig(4, 128, False, True), SyntheticConfig(4, 128, True, False),
                     SyntheticConfig(6, -1, False, True), SyntheticConfig(6, 128, False, False))


def synthetic_combinations() -> set[tuple[str, str, str, str]]:
    """(weight format, activation mode, op, epilogue) names, as kernels.h's enums, that the synthetic cases run with
    every tactic: WeightOnlyLinear nodes are weight-only linears without a fused activation."""
    names = {8: "int8", 4: "int4", 6: "fp6_e3m2"}
    return {(names[c.bits], "weight_only", "linear", "none") for c in SYNTHETIC_CONFIGS}


def synthetic_cases(out: Path, rng: np.random.Generator, k: int, n: int) -> list[str]:
    lines = []
    for act in ("fp16", "bf16"):
        for bits, g, asym, with_bias in SYNTHETIC_CONFIGS:
            groups = 1 if g == -1 else k // g
            fmt = format_by_bits(bits)
            u = rng.integers(0, 1 << bits, size=(k, n), dtype=np.int64).astype(np.uint8)  # FP6: all 64 codes
            packed = fmt.pack(u)
            # Scales of a typical weight (|w| ~ 0.02 .. 0.1) spread over columns and groups; never zero.
            top = 28.0 if fmt.qdq is None else 1 << (bits - 1)  # the largest code magnitude (FP6: 28)
            scales = rng.uniform(0.5, 2.0, size=(groups, n)) * (0.05 / top)
            zeros_bits = None
            if asym:
                zeros_bits = to_bits(rng.integers(0, 1 << bits, size=(groups, n)).astype(np.float32), act)
            bias_bits = to_bits(rng.normal(0.0, 0.5, size=n), act) if with_bias else None
            name = f"{fmt.name}_{'pc' if g == -1 else f'g{g}'}{'_asym' if asym else ''}{'_bias' if with_bias else ''}_{act}"
            attrs = dict(bits=bits, group_size=g, in_features=k, out_features=n, layout=fmt.layout.VERSION,
                         has_zeros=int(asym), has_bias=int(with_bias))
            lines.append(write_case(out, name, attrs, act, packed, to_bits(scales, act), zeros_bits, bias_bits))
    return lines


def _raw_u16(t) -> np.ndarray:
    import onnx

    if t.raw_data:
        return np.frombuffer(t.raw_data, np.uint16).copy()
    if t.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
        return np.asarray(t.int32_data, np.uint16)
    raise ValueError(f"{t.name}: expected fp16/bf16 data, got data type {t.data_type}")


def model_cases(out: Path, model_path: Path, prefix: str) -> list[str]:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    inits = {t.name: t for t in model.graph.initializer}
    lines = []
    for idx, node in enumerate(model.graph.node):
        if node.op_type != "WeightOnlyLinear":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        attrs = {a: int(attrs[a]) for a in INT_ATTRS}
        scales_t = inits[node.input[2]]
        act = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}[scales_t.data_type]
        packed = numpy_helper.to_array(inits[node.input[1]]).astype(np.int32)
        pos = 3
        zeros_bits = bias_bits = None
        if attrs["has_zeros"]:
            zeros_bits = _raw_u16(inits[node.input[pos]])
            pos += 1
        if attrs["has_bias"]:
            bias_bits = _raw_u16(inits[node.input[pos]])
        name = f"{prefix}{idx}_" + "".join(c if c.isalnum() else "_" for c in (node.name or "node"))[:60]
        lines.append(write_case(out, name, attrs, act, packed, _raw_u16(scales_t), zeros_bits, bias_bits))
    if not lines:
        raise SystemExit(f"{model_path}: no WeightOnlyLinear node (quantize it with `python -m graph_passes quantize`)")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder")
    ap.add_argument("--model", type=Path, action="append", default=[], help="quantized ONNX model (repeatable)")
    ap.add_argument("--synthetic", action="store_true", help="also the synthetic matrix (default without --model)")
    ap.add_argument("-k", type=int, default=1024, help="in_features of the synthetic cases")
    ap.add_argument("-n", type=int, default=320, help="out_features of the synthetic cases")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: fresh each run)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 32))
    rng = np.random.default_rng(seed)
    lines = []
    if args.synthetic or not args.model:
        lines += synthetic_cases(args.out, rng, args.k, args.n)
    for i, m in enumerate(args.model):
        lines += model_cases(args.out, m, f"m{i}_")
    (args.out / "cases.txt").write_text("\n".join(lines) + "\n")
    print(f"make_cases: {len(lines)} cases in {args.out} (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
