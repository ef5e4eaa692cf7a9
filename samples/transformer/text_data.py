"""Text of the transformer sample and its model inputs: the packaged WordPiece tokenizer (``tokenizers``), one feed
per sentence (``input_ids``, ``attention_mask`` [1, seq], no padding), and ``load_data`` for ``--calib-script``.

    python3 -m graph_passes quantize minilm.onnx --method awq --calib-script samples/transformer/text_data.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CALIBRATION = HERE / "calibration.txt"
EVALUATION = HERE / "evaluation.txt"
sys.path.insert(0, str(HERE))


def sentences(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def tokenizer():
    """The model's own tokenizer.json (lower-casing BERT WordPiece, [CLS] ... [SEP]) without padding."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError("the transformer sample tokenizes with the tokenizers package: pip install tokenizers") from exc
    from build_model import model_dir

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
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
