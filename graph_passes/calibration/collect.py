"""Calibration statistics with ONNX Runtime: each quantizable linear's input becomes an extra graph output, the model
runs on every calibration sample, and each sample's activations update :class:`TensorStats` and are dropped.

Memory: the statistics of all tensors may not fit (a Gram matrix is 8 K^2 bytes), so :func:`plan_passes` splits the
tensors into passes whose statistics fit a budget (a tensor larger than the budget gets a pass of its own), and the
samples are run once per pass (``graph_passes.calibration.methods.Calibration``). The session reads the model's
external data from the model's folder itself (the protobuf handed to it holds no weights); the CUDA provider is used
when ONNX Runtime has it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from graph_passes.calibration.stats import TensorStats
from graph_passes.errors import UserError

DEFAULT_BUDGET = 1 << 30   # bytes of statistics held at once
DEFAULT_MAX_ROWS = 1024    # rows kept per tensor for AWQ's alpha search


@dataclass
class CalibrationData:
    stats: dict[str, TensorStats]   # by activation tensor name
    samples: int
    tokens: int                     # rows of the largest input seen (tokens for a transformer)


def plan_passes(sizes: dict[str, int], budget: int) -> list[list[str]]:
    """Tensor names grouped so that each group's statistics fit ``budget`` bytes (in the order given)."""
    passes, current, used = [], [], 0
    for name, size in sizes.items():
        if current and used + size > budget:
            passes.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        passes.append(current)
    return passes


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _providers():
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def _session(model, outputs: list[str], base_dir: str | None):
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output}
    for name in outputs:
        if name not in known:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.log_severity_level = 3
    if base_dir:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", base_dir)
    try:
        return ort.InferenceSession(m.SerializeToString(), opts, providers=_providers())
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise UserError(f"ONNX Runtime cannot load the model for calibration: {_first_line(exc)}") from None


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "sample"):
    """A tqdm bar on stderr, shown only when asked and stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not (enabled and sys.stderr.isatty()), leave=False)


def collect(model, tensors: dict[str, int], feeds: list[dict[str, np.ndarray]], *, base_dir: str | None = None,
            gram: bool = True, max_rows: int = DEFAULT_MAX_ROWS, progress: bool = False, label: str = "calibrating",
            seeds: dict[str, int] | None = None) -> CalibrationData:
    """Statistics of ``tensors`` ({name: channels K}) of ``model`` (ModelProto, external data left on disk), in one
    run over the samples; ``seeds`` (by name, default 0, 1, ...) seed each tensor's row sample."""
    names = list(tensors)
    seeds = seeds or {n: i for i, n in enumerate(names)}
    sess = _session(model, names, base_dir)
    stats = {n: TensorStats(tensors[n], gram=gram, max_rows=max_rows, seed=seeds[n]) for n in names}
    with progress_bar(len(feeds), label, progress) as bar:
        for i, feed in enumerate(feeds):
            try:
                values = sess.run(names, feed)
            except Exception as exc:  # noqa: BLE001
                raise UserError(f"calibration sample {i}: ONNX Runtime failed: {_first_line(exc)}") from None
            for name, value in zip(names, values):
                try:
                    stats[name].update(value)
                except ValueError as exc:
                    raise UserError(f"calibration sample {i}: input '{name}' of a linear: {exc}") from None
            bar.update(1)
    tokens = max((s.n_rows for s in stats.values()), default=0)
    return CalibrationData(stats=stats, samples=len(feeds), tokens=tokens)
