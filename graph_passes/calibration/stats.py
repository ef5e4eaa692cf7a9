"""Streaming statistics of one activation tensor (the input of one or several linears), fed batch by batch.

Kept per tensor, never the activations themselves:
  * ``abs_mean`` [K]: mean |x| per input channel (AWQ's activation scale), ``abs_max`` [K]: max |x| (SmoothQuant's);
  * ``gram`` [K, K] float64: ``H = sum x^T x`` over every row (GPTQ's Hessian, AWQ's output-error clip search);
  * ``rows`` [<= max_rows, K] float32: a uniform random subsample of the rows (reservoir sampling, seeded), for
    AWQ's search of the scaling exponent on the layer's output error.
A row is one token: the tensor reshaped to [-1, K].
"""

from __future__ import annotations

import numpy as np


class TensorStats:
    def __init__(self, k: int, *, gram: bool = True, max_rows: int = 0, seed: int = 0):
        self.k = k
        self.n_rows = 0
        self._abs_sum = np.zeros(k, np.float64)
        self.abs_max = np.zeros(k, np.float64)
        self.gram = np.zeros((k, k), np.float64) if gram else None
        self.max_rows = max_rows
        self._rows = np.empty((max_rows, k), np.float32) if max_rows else None
        self._rng = np.random.default_rng(seed)

    @staticmethod
    def nbytes_for(k: int, *, gram: bool, max_rows: int) -> int:
        return 8 * k + (8 * k * k if gram else 0) + 4 * k * max_rows

    @property
    def abs_mean(self) -> np.ndarray:
        return self._abs_sum / max(self.n_rows, 1)

    @property
    def rows(self) -> np.ndarray | None:
        return None if self._rows is None else self._rows[: min(self.n_rows, self.max_rows)]

    @classmethod
    def combine(cls, parts: list["TensorStats"]) -> "TensorStats":
        """The statistics of the rows of all ``parts`` together (same K): sums added; the row sample takes from each
        part's sample in proportion to the part's rows (up to the parts' largest max_rows), as a uniform sample of
        all the rows would; the one part itself when there is only one."""
        if len(parts) == 1:
            return parts[0]
        grams = [p.gram for p in parts if p.gram is not None]
        total = sum(p.n_rows for p in parts)
        keep = min(total, max(p.max_rows for p in parts))
        rng = np.random.default_rng(0)
        rows = [p.rows[np.sort(rng.choice(len(p.rows), min(len(p.rows), round(keep * p.n_rows / total)),
                                          replace=False))]
                for p in parts if p.rows is not None and total]
        out = cls(parts[0].k, gram=False)
        out.n_rows = sum(p.n_rows for p in parts)
        out._abs_sum = sum(p._abs_sum for p in parts)
        out.abs_max = np.max([p.abs_max for p in parts], axis=0)
        out.gram = sum(grams) if len(grams) == len(parts) else None
        if rows:
            out._rows = np.concatenate(rows)
            out.max_rows = out._rows.shape[0]
        return out

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if x.shape[-1] != self.k:
            raise ValueError(f"expected {self.k} channels, got shape {x.shape}")
        x = x.reshape(-1, self.k).astype(np.float32, copy=False)
        if not np.isfinite(x).all():
            raise ValueError("activation contains NaN/Inf")
        self._abs_sum += np.abs(x).sum(axis=0, dtype=np.float64)
        if x.shape[0]:
            np.maximum(self.abs_max, np.abs(x).max(axis=0), out=self.abs_max)
        if self.gram is not None:
            x64 = x.astype(np.float64)
            self.gram += x64.T @ x64
        if self._rows is not None:
            self._sample(x)
        self.n_rows += x.shape[0]

    def _sample(self, x: np.ndarray) -> None:
        """Reservoir sampling (Algorithm R, vectorized per batch): every row seen is kept with equal probability."""
        seen = self.n_rows
        fill = max(0, min(self.max_rows - seen, x.shape[0]))
        if fill:
            self._rows[seen: seen + fill] = x[:fill]
        rest = np.arange(fill, x.shape[0])
        if rest.size:
            # Row i (global index seen + i) draws a slot in [0, its index].
            slots = self._rng.integers(0, seen + rest + 1)
            keep = slots < self.max_rows
            self._rows[slots[keep]] = x[rest[keep]]
