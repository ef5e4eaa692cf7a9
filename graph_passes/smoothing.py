"""SmoothQuant smoothing for W8A8: move activation outliers into the weights before quantization (graph -> graph).

For each activation tensor ``X`` read by linear layers (``MatMul`` / ``MatMul+Add`` with a constant weight), with
``a_j = max |X[..., j]|`` over the calibration samples and ``w_j = max |W[j, :]|`` over every such layer reading
``X``:

    s_j = a_j^alpha / w_j^(1 - alpha)          (s_j = 1 where a_j or w_j is 0; clamped to [1e-5, 1e5], in an
                                               fp16 graph to [2^-14, 2^14])
    X' = X * (1 / s)   (one Mul per tensor)     W' = diag(s) @ W   (one new constant per weight)

so ``X' @ W' = X @ W`` in exact arithmetic and the per-token INT8 activations see channels of more even range
(Xiao et al., SmoothQuant, 2022; alpha 0.5 is their default). The Mul stays in the graph (TensorRT fuses an
elementwise scale into its producer); ``Gemm`` nodes and weights reached through Cast / Transpose are left as they
are and counted in the result. The ranges ``a_j`` are gathered like the calibrated methods' statistics
(``graph_passes.calibration.collect``: inputs of linears inside If / Loop / Scan bodies included, NaN / Inf refused);
the activations read through one weight get one ``s`` (``a_j`` and ``w_j`` over all of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.errors import UserError

S_MIN, S_MAX = 1e-5, 1e5


@dataclass
class SmoothingResult:
    smoothed: int   # linear layers whose weight was scaled
    tensors: int    # activation tensors that got a Mul
    skipped: int    # matched layers left unsmoothed (Gemm, or a weight behind Cast / Transpose)


def smoothing_scales(a_max: np.ndarray, w_max: np.ndarray, alpha: float, dtype=np.float32) -> np.ndarray:
    """``s = a^alpha / w^(1 - alpha)`` per channel, 1 where either is 0, clamped to [S_MIN, S_MAX] (float64); for an
    fp16 graph (``dtype``) to [1 / 16384, 16384] too, so that s and 1 / s are normal fp16 numbers."""
    a, w = np.asarray(a_max, np.float64), np.asarray(w_max, np.float64)
    ok = (a > 0) & (w > 0)
    s = np.ones_like(a)
    s[ok] = a[ok] ** alpha / w[ok] ** (1.0 - alpha)
    bound = min(S_MAX, 1.0 / float(np.finfo(np.float16).tiny)) if np.dtype(dtype) == np.float16 else S_MAX
    return np.clip(s, max(S_MIN, 1.0 / bound), bound)


def smooth_model(model, config, feeds: list[dict], alpha: float):
    """(smoothed ModelProto, SmoothingResult). ``model`` needs its weights loaded or ``config.external_data_dir``.
    Linears inside If / Loop / Scan bodies are smoothed too (the Mul goes where the activation is made), and the
    activations read through one weight (``calibration.methods.linked_inputs``) share one s, so the weight stays
    one weight."""
    import onnx_graphsurgeon as gs

    from graph_passes.calibration.collect import collect
    from graph_passes.calibration.fold import multiply_input
    from graph_passes.calibration.methods import by_weight, linked_inputs
    from graph_passes.calibration.stats import TensorStats
    from graph_passes.passes._common import NameScope
    from graph_passes.passes.match import find_linear_layers
    from graph_passes.passes.scopes import hoist_shared_initializers

    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"--smooth-alpha {alpha}: must be in [0, 1]")
    if not feeds:
        raise UserError("--smooth-alpha needs calibration data (--calib-data FILE.npz or --calib-script FILE.py)")
    graph = gs.import_onnx(model)
    matches, _ = find_linear_layers(graph, config)
    usable = [m for m in matches if m.node.op == "MatMul" and not m.chain and not m.transpose and m.alpha == 1.0]
    skipped = len(matches) - len(usable)
    if not usable:
        return model, SmoothingResult(0, 0, skipped)
    stats = collect(model, {m.x.name: m.k for m in usable}, feeds, base_dir=config.external_data_dir, gram=False,
                    max_rows=0, dtypes={m.x.name: m.dtype for m in usable}).stats
    names = NameScope(graph)
    tensors = 0
    for group in linked_inputs(usable):
        ms = [m for m in usable if m.x.name in group]
        per_weight = by_weight(ms)
        weights = [same[0].load_weight(config.external_data_dir) for same in per_weight]
        w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        dtype = ms[0].dtype
        s = smoothing_scales(TensorStats.combine([stats[n] for n in group]).abs_max, w_max, alpha, dtype)
        for same, w in zip(per_weight, weights):
            scaled = gs.Constant(names(f"{same[0].source_name}_smoothed"), (w * s[:, None]).astype(dtype))
            for m in same:
                m.node.inputs[1] = scaled
        for name in group:
            readers = [m for m in ms if m.x.name == name]
            multiply_input(graph, readers[0].x, [m.node for m in readers], 1.0 / s, names, dtype, "smooth")
            tensors += 1
    out = gs.export_onnx(graph.cleanup().toposort(), do_type_check=False)
    hoist_shared_initializers(out)  # gs writes a constant into every body reading it: one weight stays one
    out.ir_version = model.ir_version
    del out.opset_import[:]
    out.opset_import.extend(model.opset_import)
    return out, SmoothingResult(len(usable), tensors, skipped)
