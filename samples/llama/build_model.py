"""Build a small Llama-style decoder as ONNX, with random weights, for trying out and testing trt-woq.

    python3 samples/llama/build_model.py -o llama.onnx
    python3 samples/llama/build_model.py --hidden 1024 --intermediate 2816 --layers 4 --heads 16 --dtype fp16 -o x.onnx

The graph is what an exporter writes for a Llama decoder, spelled in plain ONNX operators (opset 21):
input -> [embedding Gather] -> N x (RMSNorm -> q/k/v MatMul -> rotary -> causal attention (grouped KV heads) ->
o MatMul -> residual Add -> RMSNorm -> gate/up MatMul -> SiLU(gate) * up -> down MatMul -> residual Add) ->
final RMSNorm -> lm_head MatMul -> logits. Batch and sequence length are dynamic. Every projection is a MatMul whose
second input is a constant [K, N] initializer, named after its Hugging Face module (``layers.0.self_attn.q_proj``).

Weights are N(0, 1/sqrt(fan_in)); the last projection of each residual branch (o_proj, down_proj) is further
scaled by 1/sqrt(2 * layers), the GPT-2 / Megatron-LM initialization, and the embedding table (or the hidden-states
input) is N(0, 1), so that each block adds a moderate update to the residual stream, as in trained models. A few
hidden channels (default 4, the same ones in every layer) are outlier channels, as in trained LLMs: every RMSNorm
weight is 10 to 30 times larger on them, so the activations entering q/k/v, gate/up and lm_head carry a handful of
input channels 10-30x larger than the rest, and any weight error in those rows of W is amplified by as much.
RMSNorm runs in float32 with Casts around it in an fp16 graph, as Hugging Face's LlamaRMSNorm does. The seed makes
the weights reproducible.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 21
DTYPES = {"fp32": (np.float32, TensorProto.FLOAT), "fp16": (np.float16, TensorProto.FLOAT16)}


class _Builder:
    """Collects nodes and initializers; names every node so that --include/--exclude regexes can target it."""

    def __init__(self, np_dtype, onnx_dtype, rng: np.random.Generator):
        self.np_dtype, self.onnx_dtype, self.rng = np_dtype, onnx_dtype, rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._consts: dict[tuple, str] = {}

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, value, dtype=None) -> str:
        """A small shared constant initializer (shapes, axes, scalars)."""
        array = np.asarray(value, dtype=dtype if dtype is not None else self.np_dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.init(f"const_{len(self._consts)}", array)
        return self._consts[key]

    def op(self, op_type: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> str | list[str]:
        outputs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, **attrs))
        return outputs if n_out > 1 else outputs[0]

    def linear(self, x: str, k: int, n: int, name: str, gain: float = 1.0) -> str:
        w = self.rng.standard_normal((k, n)) * (gain / np.sqrt(k))
        return self.op("MatMul", [x, self.init(f"{name}.weight", w.astype(self.np_dtype))], name)

    def rms_norm(self, x: str, hidden: int, name: str, eps: float, outliers: np.ndarray) -> str:
        gamma = 1.0 + 0.1 * self.rng.standard_normal(hidden)
        gamma[outliers] *= self.rng.uniform(10.0, 30.0, size=outliers.size)
        gamma = gamma.astype(np.float32)
        if self.np_dtype != np.float32:
            x = self.op("Cast", [x], f"{name}.cast_in", to=TensorProto.FLOAT)
        sq = self.op("Mul", [x, x], f"{name}.square")
        mean = self.op("ReduceMean", [sq, self.const([-1], np.int64)], f"{name}.mean", keepdims=1)
        var = self.op("Add", [mean, self.const(eps, np.float32)], f"{name}.add_eps")
        inv = self.op("Reciprocal", [self.op("Sqrt", [var], f"{name}.sqrt")], f"{name}.rsqrt")
        y = self.op("Mul", [self.op("Mul", [x, inv], f"{name}.normalize"), self.init(f"{name}.weight", gamma)],
                    f"{name}.scale")
        if self.np_dtype != np.float32:
            y = self.op("Cast", [y], f"{name}.cast_out", to=self.onnx_dtype)
        return y


def _rotary_tables(max_seq: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    freqs = np.outer(np.arange(max_seq, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [max_seq, head_dim], Hugging Face's rotate_half convention
    return np.cos(emb), np.sin(emb)


def build(hidden: int = 512, intermediate: int = 1536, layers: int = 2, heads: int = 8, kv_heads: int | None = None,
          vocab: int = 2048, dtype: str = "fp32", input_kind: str = "ids", rotary: bool = True,
          outliers: int = 4, max_seq: int = 2048, seed: int = 0) -> onnx.ModelProto:
    """The decoder as an onnx.ModelProto (see the module docstring)."""
    kv_heads = heads if kv_heads is None else kv_heads
    if hidden % heads or heads % kv_heads:
        raise ValueError(f"hidden {hidden} must divide into {heads} heads, and heads into kv_heads {kv_heads}")
    head_dim = hidden // heads
    if head_dim % 2:
        raise ValueError(f"head_dim {head_dim} must be even for rotary embeddings")
    np_dtype, onnx_dtype = DTYPES[dtype]
    b = _Builder(np_dtype, onnx_dtype, np.random.default_rng(seed))
    eps = 1e-5
    outlier_channels = b.rng.choice(hidden, size=min(outliers, hidden), replace=False)
    residual_gain = 1.0 / np.sqrt(2 * layers)  # GPT-2 / Megatron-LM scaling of the residual branches' last projection

    if input_kind == "ids":
        graph_input = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
        table = b.rng.standard_normal((vocab, hidden)).astype(np_dtype)
        x = b.op("Gather", [b.init("embed_tokens.weight", table), "input_ids"], "embed_tokens", axis=0)
        shape_src = "input_ids"
    elif input_kind == "hidden":
        graph_input = helper.make_tensor_value_info("hidden_states", onnx_dtype, ["batch", "seq", hidden])
        x = shape_src = "hidden_states"
    else:
        raise ValueError(f"input kind {input_kind!r} is not 'ids' or 'hidden'")

    # Sequence length as a 1-D tensor, for slicing the rotary tables and building the causal mask.
    seq = b.op("Shape", [shape_src], "seq_len", start=1, end=2)
    seq_sq = b.op("Concat", [seq, seq], "seq_len_square", axis=0)
    ones = b.op("ConstantOfShape", [seq_sq], "mask.ones", value=numpy_helper.from_array(np.ones(1, np_dtype)))
    lower = b.op("Trilu", [ones], "mask.lower", upper=0)
    # 0 where attention is allowed (k <= q), -10000 elsewhere; added to the scores before the softmax.
    mask = b.op("Mul", [b.op("Sub", [lower, b.const(1.0)], "mask.sub"), b.const(1e4)], "mask.scale")
    if rotary:
        cos, sin = _rotary_tables(max_seq, head_dim, 10000.0)
        cos_t = b.op("Slice", [b.init("rotary.cos", cos.astype(np_dtype)), b.const([0], np.int64), seq,
                               b.const([0], np.int64)], "rotary.cos_slice")
        sin_t = b.op("Slice", [b.init("rotary.sin", sin.astype(np_dtype)), b.const([0], np.int64), seq,
                               b.const([0], np.int64)], "rotary.sin_slice")

    def heads_first(t: str, n_heads: int, name: str) -> str:  # [B, S, n*D] -> [B, n, S, D]
        r = b.op("Reshape", [t, b.const([0, 0, n_heads, head_dim], np.int64)], f"{name}.reshape")
        return b.op("Transpose", [r], f"{name}.transpose", perm=[0, 2, 1, 3])

    def rope(t: str, name: str) -> str:  # t * cos + rotate_half(t) * sin, on [B, n, S, D]
        half = head_dim // 2
        x1 = b.op("Slice", [t, b.const([0], np.int64), b.const([half], np.int64), b.const([-1], np.int64)],
                  f"{name}.x1")
        x2 = b.op("Slice", [t, b.const([half], np.int64), b.const([head_dim], np.int64), b.const([-1], np.int64)],
                  f"{name}.x2")
        rot = b.op("Concat", [b.op("Neg", [x2], f"{name}.neg"), x1], f"{name}.rotate_half", axis=-1)
        return b.op("Add", [b.op("Mul", [t, cos_t], f"{name}.mul_cos"), b.op("Mul", [rot, sin_t], f"{name}.mul_sin")],
                    f"{name}.add")

    def repeat_kv(t: str, name: str) -> str:  # [B, kv, S, D] -> [B, heads, S, D]
        if kv_heads == heads:
            return t
        u = b.op("Unsqueeze", [t, b.const([2], np.int64)], f"{name}.unsqueeze")
        e = b.op("Expand", [u, b.const([1, 1, heads // kv_heads, 1, 1], np.int64)], f"{name}.expand")
        return b.op("Reshape", [e, b.const([0, heads, -1, head_dim], np.int64)], f"{name}.reshape")

    for i in range(layers):
        p = f"layers.{i}"
        h = b.rms_norm(x, hidden, f"{p}.input_layernorm", eps, outlier_channels)
        q = heads_first(b.linear(h, hidden, heads * head_dim, f"{p}.self_attn.q_proj"), heads, f"{p}.q")
        k = heads_first(b.linear(h, hidden, kv_heads * head_dim, f"{p}.self_attn.k_proj"), kv_heads,
                        f"{p}.k")
        v = heads_first(b.linear(h, hidden, kv_heads * head_dim, f"{p}.self_attn.v_proj"), kv_heads,
                        f"{p}.v")
        if rotary:
            q, k = rope(q, f"{p}.q_rope"), rope(k, f"{p}.k_rope")
        k, v = repeat_kv(k, f"{p}.k_repeat"), repeat_kv(v, f"{p}.v_repeat")
        kt = b.op("Transpose", [k], f"{p}.k_transpose", perm=[0, 1, 3, 2])
        scores = b.op("Mul", [b.op("MatMul", [q, kt], f"{p}.attn.qk"), b.const(1.0 / np.sqrt(head_dim))],
                      f"{p}.attn.scale")
        probs = b.op("Softmax", [b.op("Add", [scores, mask], f"{p}.attn.mask")], f"{p}.attn.softmax", axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v], f"{p}.attn.pv")], f"{p}.attn.ctx_transpose",
                   perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, b.const([0, 0, heads * head_dim], np.int64)], f"{p}.attn.ctx_reshape")
        x = b.op("Add", [x, b.linear(ctx, heads * head_dim, hidden, f"{p}.self_attn.o_proj", residual_gain)],
                 f"{p}.attn_residual")

        h = b.rms_norm(x, hidden, f"{p}.post_attention_layernorm", eps, outlier_channels)
        gate = b.linear(h, hidden, intermediate, f"{p}.mlp.gate_proj")
        up = b.linear(h, hidden, intermediate, f"{p}.mlp.up_proj")
        act = b.op("Mul", [gate, b.op("Sigmoid", [gate], f"{p}.mlp.sigmoid")], f"{p}.mlp.silu")
        down = b.linear(b.op("Mul", [act, up], f"{p}.mlp.gate_mul_up"), intermediate, hidden,
                        f"{p}.mlp.down_proj", residual_gain)
        x = b.op("Add", [x, down], f"{p}.mlp_residual")

    h = b.rms_norm(x, hidden, "norm", eps, outlier_channels)
    logits = b.linear(h, hidden, vocab, "lm_head")
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))

    graph = helper.make_graph(b.nodes, "llama_sample", [graph_input],
                              [helper.make_tensor_value_info("logits", onnx_dtype, ["batch", "seq", vocab])],
                              initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="trt-woq-samples")
    model.ir_version = 10  # opset 21 needs IR >= 10; keeps the file loadable by onnxruntime releases that cap the IR
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", required=True, help="where to write the .onnx file")
    parser.add_argument("--hidden", type=int, default=512, help="hidden size (default 512)")
    parser.add_argument("--intermediate", type=int, default=1536, help="MLP intermediate size (default 1536)")
    parser.add_argument("--layers", type=int, default=2, help="decoder blocks (default 2)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (default 8)")
    parser.add_argument("--kv-heads", type=int, default=None, help="key/value heads, grouped-query attention "
                        "(default: same as --heads)")
    parser.add_argument("--vocab", type=int, default=2048, help="vocabulary size, lm_head N (default 2048)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32",
                        help="weights and activations (default fp32)")
    parser.add_argument("--input", dest="input_kind", choices=("ids", "hidden"), default="ids",
                        help="ids: input_ids [batch, seq] int64 through an embedding table; hidden: hidden_states "
                             "[batch, seq, hidden] (default ids)")
    parser.add_argument("--no-rotary", dest="rotary", action="store_false", help="leave out rotary embeddings")
    parser.add_argument("--outliers", type=int, default=4,
                        help="outlier hidden channels: RMSNorm weights 10-30x larger there (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="weights seed (default 0)")
    args = parser.parse_args(argv)
    try:
        model = build(hidden=args.hidden, intermediate=args.intermediate, layers=args.layers, heads=args.heads,
                      kv_heads=args.kv_heads, vocab=args.vocab, dtype=args.dtype, input_kind=args.input_kind,
                      rotary=args.rotary, outliers=args.outliers, seed=args.seed)
        onnx.checker.check_model(model, full_check=True)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, args.output)
    except (ValueError, OSError, onnx.checker.ValidationError) as exc:
        print(f"build_model: error: {exc}", file=sys.stderr)
        return 2
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    n_linear = sum(1 for n in model.graph.node if n.op_type == "MatMul" and n.input[1].endswith(".weight"))
    print(f"wrote {args.output}: {args.layers} layers, hidden {args.hidden}, intermediate {args.intermediate}, "
          f"{args.heads} heads, vocab {args.vocab}, {args.dtype}, {n_linear} projection MatMuls, "
          f"{n_params / 1e6:.1f} M parameters, {Path(args.output).stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
