"""Calibration statistics with ONNX Runtime: each quantizable linear's input becomes an extra graph output (passed up
through its If / Loop / Scan nodes when it lies in a body), the model runs on every calibration sample, and each
sample's activations update :class:`TensorStats` and are dropped.

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
from graph_passes.passes.scopes import all_graphs, node_bodies

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


def _defined(graph) -> set[str]:
    return {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | \
        {t.name for t in graph.initializer}


def _scope_path(graph, name: str) -> list | None:
    """[(node, attribute, body), ...] from ``graph`` down to the body that defines ``name`` ([] when ``graph``
    does), or None."""
    if name in _defined(graph):
        return []
    for node in graph.node:
        for attr, body in node_bodies(node):
            path = _scope_path(body, name)
            if path is not None:
                return [(node, attr, body), *path]
    return None


def _expose(model, tensors: dict[str, int], dtypes: dict) -> dict[str, str]:
    """Makes every tensor of ``tensors`` ({name: channels K}) an output of ``model``'s main graph (ModelProto,
    changed in place): {name: output name}. A tensor defined inside an If branch, a Loop or a Scan body leaves it
    as a new output of the body (for a Scan a scan output: the values of every iteration, stacked; for a Loop a
    carried value gathering them, :func:`_accumulate`) and of the node, up to the main graph; the other branch of an
    If gives an empty [0, K] tensor of ``dtypes[name]`` (numpy dtype, default float32). A tensor behind any other
    node with a body is left out."""
    import onnx
    from onnx import helper, numpy_helper

    from graph_passes.passes._common import NameScope

    known = {o.name for o in model.graph.output}
    fresh = NameScope(used={o for g in all_graphs(model.graph) for o in _defined(g)} | known)

    out = {}
    for name, k in tensors.items():
        path = _scope_path(model.graph, name)
        if path is None:
            continue
        dtype = np.dtype(dtypes.get(name, np.float32))
        elem = helper.np_dtype_to_tensor_dtype(dtype)
        current = name
        parents = [model.graph, *(body for _, _, body in path)]
        for depth, (node, attr, body) in reversed(list(enumerate(path))):
            outs = len(body.output) - (node.op_type == "Loop")  # a Loop body's first output is the condition
            if node.op_type not in ("If", "Loop", "Scan") or len(node.output) > outs:
                current = None
                break
            node.output.extend(fresh(f"{node.name or node.op_type}_unused") for _ in range(outs - len(node.output)))
            if node.op_type == "Loop":
                current = _accumulate(node, body, parents[depth], current, k, dtype, fresh)
                continue
            body.output.append(helper.make_tensor_value_info(current, elem, None))
            if node.op_type == "If":
                other = next(g for a, g in node_bodies(node) if a != attr)
                empty = fresh(f"{current}_empty")
                value = numpy_helper.from_array(np.zeros((0, k), dtype), empty)
                other.node.append(helper.make_node("Constant", [], [empty], name=empty, value=value))
                other.output.append(helper.make_tensor_value_info(empty, elem, None))
            for a in node.attribute:
                if node.op_type == "Scan" and a.name in ("scan_output_axes", "scan_output_directions"):
                    a.ints.append(0)
            current = fresh(f"{current}_calib")
            node.output.append(current)
        if current is None:
            continue
        if current not in known:
            model.graph.output.append(onnx.ValueInfoProto(name=current))
            known.add(current)
        out[name] = current
    return out


def _accumulate(loop, body, parent, name: str, k: int, dtype, fresh) -> str:
    """A new carried value of ``loop`` (in graph ``parent``) gathering the rows [-1, K] of ``name`` (made in its
    ``body``) over the iterations, Concat after Concat, which holds when the shape of ``name`` changes from one
    iteration to the next (a scan output would need one shape); the name of the loop's output holding them."""
    from onnx import helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(dtype)
    carried = len(loop.input) - 2
    first, shape = fresh(f"{name}_rows_init"), fresh(f"{name}_rows_shape")
    rows_in, flat, rows_out, out = (fresh(f"{name}_{s}") for s in ("rows_in", "rows", "rows_out", "calib"))
    parent.initializer.append(numpy_helper.from_array(np.zeros((0, k), dtype), first))
    body.initializer.append(numpy_helper.from_array(np.array([-1, k], np.int64), shape))
    body.node.extend([helper.make_node("Reshape", [name, shape], [flat], name=flat),
                      helper.make_node("Concat", [rows_in, flat], [rows_out], name=rows_out, axis=0)])
    loop.input.append(first)
    body.input.append(helper.make_tensor_value_info(rows_in, elem, None))
    body_outputs = list(body.output)
    body_outputs.insert(1 + carried, helper.make_tensor_value_info(rows_out, elem, None))
    del body.output[:]
    body.output.extend(body_outputs)
    node_outputs = list(loop.output)
    node_outputs.insert(carried, out)
    del loop.output[:]
    loop.output.extend(node_outputs)
    return out


def _session(model, tensors: dict[str, int], dtypes: dict, base_dir: str | None):
    """(session, {tensor name: output name}) of ``model`` with ``tensors`` exposed as outputs (:func:`_expose`)."""
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    outputs = _expose(m, tensors, dtypes)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.log_severity_level = 3
    if base_dir:
        opts.add_session_config_entry("session.model_external_initializers_file_folder_path", base_dir)
    try:
        return ort.InferenceSession(m.SerializeToString(), opts, providers=_providers()), outputs
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise UserError(f"ONNX Runtime cannot load the model for calibration: {_first_line(exc)}") from None


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "sample"):
    """A tqdm bar on stderr, shown only when asked and stderr is a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not (enabled and sys.stderr.isatty()), leave=False)


def collect(model, tensors: dict[str, int], feeds: list[dict[str, np.ndarray]], *, base_dir: str | None = None,
            gram: bool = True, max_rows: int = DEFAULT_MAX_ROWS, progress: bool = False, label: str = "calibrating",
            seeds: dict[str, int] | None = None, dtypes: dict | None = None) -> CalibrationData:
    """Statistics of ``tensors`` ({name: channels K}) of ``model`` (ModelProto, external data left on disk), in one
    run over the samples; ``seeds`` (by name, default 0, 1, ...) seed each tensor's row sample; ``dtypes`` (by name,
    numpy, default float32): the tensors' dtypes, needed for those inside If branches. A tensor that cannot be
    reached (behind a node with a body other than If / Loop / Scan) gets no rows."""
    seeds = seeds or {n: i for i, n in enumerate(tensors)}
    sess, outputs = _session(model, tensors, dtypes or {}, base_dir)
    names = list(outputs)
    stats = {n: TensorStats(k, gram=gram, max_rows=max_rows, seed=seeds[n]) for n, k in tensors.items()}
    with progress_bar(len(feeds), label, progress) as bar:
        for i, feed in enumerate(feeds):
            try:
                values = sess.run([outputs[n] for n in names], feed)
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
