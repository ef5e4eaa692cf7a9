"""SmoothQuant smoothing for W8A8: move activation outliers into the weights before quantization (graph -> graph).

For each activation tensor ``X`` read by linear layers (``MatMul`` / ``MatMul+Add`` with a constant weight), with
``a_j = max |X[..., j]|`` over the calibration samples and ``w_j = max |W[j, :]|`` over every such layer reading
``X``:

    s_j = a_j^alpha / w_j^(1 - alpha)          (s_j = 1 where a_j or w_j is 0; clamped to [1e-5, 1e5], in an
                                               fp16 graph to [2^-14, 2^14])
    X' = X * (1 / s)   (one Mul per tensor)     W' = diag(s) @ W   (each layer's own constant)

so ``X' @ W' = X @ W`` in exact arithmetic and the per-token INT8 activations see channels of more even range
(Xiao et al., SmoothQuant, 2022; alpha 0.5 is their default). The Mul stays in the graph (TensorRT fuses an
elementwise scale into its producer); ``Gemm`` nodes and weights reached through Cast / Transpose are left as they
are and counted in the result.
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


def activation_absmax(model, names: list[str], feeds: list[dict], base_dir: str | None = None
                      ) -> dict[str, np.ndarray]:
    """Per last-axis channel max |x| of each tensor in ``names`` over ``feeds``, run with ONNX Runtime (CPU);
    external data is read from ``base_dir``."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    if base_dir is not None:
        load_external_data_for_model(probe, base_dir)
    known = {o.name for o in probe.graph.output}
    for name in names:
        if name not in known:
            probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
        result: dict[str, np.ndarray] = {}
        for i, feed in enumerate(feeds):
            for name, value in zip(names, sess.run(names, feed)):
                v = np.abs(np.asarray(value, np.float64)).reshape(-1, value.shape[-1]).max(axis=0)
                if not np.isfinite(v).all():
                    raise UserError(f"calibration sample {i}: input '{name}' of a linear: activation contains "
                                    f"NaN/Inf")
                result[name] = v if name not in result else np.maximum(result[name], v)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types for a model or feed it cannot run
        raise UserError(f"calibration: ONNX Runtime could not run the model on the calibration data: "
                        f"{str(exc).splitlines()[0]}") from None
    return result


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
    """(smoothed ModelProto, SmoothingResult). ``model`` needs its weights loaded or ``config.external_data_dir``."""
    import onnx_graphsurgeon as gs

    from graph_passes.passes._common import NameScope
    from graph_passes.passes.match import find_linear_layers

    if not 0.0 <= alpha <= 1.0:
        raise UserError(f"--smooth-alpha {alpha}: must be in [0, 1]")
    if not feeds:
        raise UserError("--smooth-alpha needs calibration data (--calib-data FILE.npz or --calib-script FILE.py)")
    graph = gs.import_onnx(model)
    matches, _ = find_linear_layers(graph, config)
    groups: dict[str, list] = {}
    skipped = 0
    for m in matches:
        if m.graph is not graph or m.node.op != "MatMul" or m.chain or m.transpose or m.alpha != 1.0:
            skipped += 1
            continue
        groups.setdefault(m.x.name, []).append(m)
    if not groups:
        return model, SmoothingResult(0, 0, skipped)
    a_max = activation_absmax(model, sorted(groups), feeds, config.external_data_dir)
    names = NameScope(graph)
    for name, ms in groups.items():
        weights = [m.load_weight(config.external_data_dir) for m in ms]
        w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        x = ms[0].x
        dtype = ms[0].dtype
        s = smoothing_scales(a_max[name], w_max, alpha, dtype)
        inv = gs.Constant(names(f"{name}_smooth_inv_scale"), (1.0 / s).astype(dtype))
        x_smooth = gs.Variable(names(f"{name}_smoothed"), dtype=dtype, shape=x.shape)
        graph.nodes.append(gs.Node("Mul", name=names(f"{name}_smooth"), inputs=[x, inv], outputs=[x_smooth]))
        for m, w in zip(ms, weights):
            scaled = gs.Constant(names(f"{m.source_name}_smoothed"), (w * s[:, None]).astype(dtype))
            m.node.inputs[0] = x_smooth
            m.node.inputs[1] = scaled
    out = gs.export_onnx(graph.cleanup().toposort(), do_type_check=False)
    out.ir_version = model.ir_version
    del out.opset_import[:]
    out.opset_import.extend(model.opset_import)
    return out, SmoothingResult(sum(len(v) for v in groups.values()), len(groups), skipped)
