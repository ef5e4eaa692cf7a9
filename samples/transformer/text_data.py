"""Text of the transformer sample and its model inputs: the packaged WordPiece tokenizer (``tokenizers``), one feed
per sentence (``input_ids``, ``attention_mask`` [1, seq], no padding), and ``load_data`` for ``--calib-script``.

    python3 -m graph_passes quantize minilm.onnx --method awq --calib-script samples/transformer/text_data.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CALIBRATION = HERE / "calibration.txt"
EVALUATION = HERE / "evaluation.txt"


def sibling(name: str):
    """``samples/transformer/NAME.py`` as module ``transformer_NAME``: samples/llama and samples/cnn have modules of
    the same names (build_model, accuracy), which a plain import could return in a process that loaded them."""
    full = f"transformer_{name}"
    if full not in sys.modules:
        spec = importlib.util.spec_from_file_location(full, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


def sentences(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def tokenizer():
    """The model's own tokenizer.json (lower-casing BERT WordPiece, [CLS] ... [SEP]) without padding."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError("the transformer sample tokenizes with the tokenizers package: pip install tokenizers") \
            from exc
    tok = Tokenizer.from_file(str(sibling("build_model").model_dir() / "tokenizer.json"))
    tok.no_padding()
    return tok


def feeds(texts: list[str]) -> list[dict[str, np.ndarray]]:
    tok = tokenizer()
    out = []
    for enc in tok.encode_batch(texts):
        ids = np.asarray(enc.ids, np.int64)[None]
        out.append({"input_ids": ids, "attention_mask": np.ones_like(ids)})
    return out


def load_data():
    """The calibration sentences, one feed each (polygraphy's data-loader convention)."""
    return feeds(sentences(CALIBRATION))


def evaluation_feeds():
    return feeds(sentences(EVALUATION))
