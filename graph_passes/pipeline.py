"""Whole-model jobs: load an ONNX file, run the rewrite pass, save without ever leaving a partial output.

Memory: the model is loaded WITHOUT its external data; each weight is read from disk when it is quantized and freed
after, so the peak is about the packed weights plus one float weight (plus, for a model stored inside the protobuf,
the protobuf itself). Initializers that stay as they were are copied from the input's external data at save time.
Output: external data (``<output>.data`` beside it) when the input used external data or the output would come near
protobuf's 2 GB limit; otherwise one file.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

from graph_passes.config import QuantConfig
from graph_passes.errors import UserError
from graph_passes.files import Outputs, all_tensors, check_model_path, external_data_files
from graph_passes.registry.methods import METHODS
from graph_passes.report import QuantReport

EXTERNAL_DATA_THRESHOLD = 1 << 30  # bytes of initializers above which the output uses external data (< 2 GB limit)


# ------------------------------------------------------------------------------------------------------------ load
def load_model(path: str):
    """(ModelProto without external data loaded, folder of the model, real paths of its external data files, checked
    by :func:`graph_passes.files.external_data_files`). UserError when unusable."""
    import onnx

    model = read_graph(path)
    data_files = external_data_files(model, path)
    try:  # by path when external data is used, so that the checker finds the data files beside the model
        onnx.checker.check_model(path if data_files else model)
    except Exception as exc:  # noqa: BLE001 - ValidationError and friends
        raise UserError(f"{path}: not a valid ONNX model (onnx.checker.check_model says: {_first_line(exc)}); fix "
                        f"the export") from None
    return model, os.path.dirname(os.path.abspath(path)), data_files


def read_graph(path: str):
    """The ModelProto of ``path`` without its external data; UserError when the file is not an ONNX model."""
    import onnx

    check_model_path(path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError, others on garbage
        raise UserError(f"{path}: not a readable ONNX model (truncated or not ONNX): "
                        f"{_first_line(exc) or type(exc).__name__}") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise UserError(f"{path}: not an ONNX model (no graph, IR version or opset); is the file truncated?")
    return model


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def default_output_path(model_path: str, config: QuantConfig) -> str:
    root, ext = os.path.splitext(model_path)
    tag = config.weight_format.name + ("" if config.group_size == -1 else f"_g{config.group_size}")
    tag += "_asym" if config.asymmetric else ""
    tag += "" if config.method == "rtn" else f"_{config.method}"
    if config.act_mode != "weight_only":
        tag += f"_{config.act_mode}" + ("_aasym" if config.act_asymmetric else "")
    return f"{root}.woq_{tag}{'_qdq' if config.format == 'qdq' else ''}{ext or '.onnx'}"


# ------------------------------------------------------------------------------------------------------------ save
def _initializer_bytes(model) -> int:
    """Bytes of every constant tensor of ``model``: initializers, also of subgraphs, and Constant nodes' values."""
    import onnx

    total = 0
    for t in all_tensors(model.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += int({e.key: e.value for e in t.external_data}.get("length", 0))
        else:
            total += len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()
    return total


def save_model(model, output_path: str, outputs: Outputs, source_dir: str, external: bool) -> None:
    """Write ``model`` (and its external data, ``<output>.data``) to the temporary place ``outputs`` gives it; they
    reach ``output_path`` on ``outputs.commit()``. Tensors still referring to the input's external data (initializers,
    also of subgraphs, and tensor attributes) are loaded from ``source_dir`` first."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    for t in all_tensors(model.graph):
        if uses_external_data(t):
            load_external_data_for_tensor(t, source_dir)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]
    tmp_model = outputs.path_for(output_path)
    try:
        if external:
            onnx.save_model(model, tmp_model, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=os.path.basename(output_path) + ".data", size_threshold=1024)
            data = os.path.join(os.path.dirname(tmp_model), os.path.basename(output_path) + ".data")
            if os.path.exists(data):  # onnx creates it readable by its owner only; the model's readers need both
                shutil.copymode(tmp_model, data)
        else:
            onnx.save_model(model, tmp_model)
    except (OSError, ValueError) as exc:
        raise UserError(f"{output_path}: cannot write the model: {_first_line(exc)}") from None


def _outputs(model_path: str, data_files: list[str], force: bool) -> Outputs:
    return Outputs([(model_path, "input model")] + [(f, "external data of the input model") for f in data_files],
                   force)


def outputs_for(model_path: str, force: bool) -> Outputs:
    """The :class:`Outputs` of a command that reads the model ``model_path`` (its external data files checked)."""
    return _outputs(model_path, external_data_files(read_graph(model_path), model_path), force)


# -------------------------------------------------------------------------------------------------------- the jobs
def _convert_function(function, version: int):
    """``function`` (a model-local FunctionProto) with its default-domain body converted to opset ``version``, as
    the model around it: a function importing another version than its model is invalid (onnx.checker) when one of
    its ops changed in between (torch_lib's Constant, CastLike). Unchanged when it cannot be converted."""
    import onnx
    from onnx import helper

    current = next((o.version for o in function.opset_import if o.domain in ("", "ai.onnx")), None)
    if current is None or current >= version:
        return function
    graph = helper.make_graph(list(function.node), function.name,
                              [onnx.ValueInfoProto(name=n) for n in function.input],
                              [onnx.ValueInfoProto(name=n) for n in function.output])
    try:
        body = onnx.version_converter.convert_version(helper.make_model(graph, opset_imports=function.opset_import),
                                                      version)
    except Exception:  # noqa: BLE001 - kept as it was: ONNX Runtime and TensorRT run it with its own imports
        return function
    out = onnx.FunctionProto()
    out.CopyFrom(function)
    del out.node[:]
    out.node.extend(body.graph.node)
    del out.opset_import[:]
    out.opset_import.extend(body.opset_import)
    return out


def _prepare_opset(model, config: QuantConfig, report: QuantReport):
    """Both formats are written with default-domain opset >= 21: Q/DQ needs it (block_size, INT4), and the
    plugin format's Q/DQ twin (graph_passes.compare) too. Older models are converted; when the converter fails, a
    plugin-format model keeps its opset (the plugin does not need 21), a Q/DQ one is refused. The graph's inputs and
    outputs stay declared as they were."""
    import onnx

    from graph_passes.passes import QDQ_OPSET

    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if current >= QDQ_OPSET:
        return model
    try:
        converted = onnx.version_converter.convert_version(model, QDQ_OPSET)
    except Exception as exc:  # noqa: BLE001
        if config.format == "plugin":
            report.notes.append(f"kept opset {current}: converting to {QDQ_OPSET} failed ({_first_line(exc)}); "
                                f"graph_passes compare needs {QDQ_OPSET} for the Q/DQ twin")
            return model
        raise UserError(f"--format qdq needs opset >= {QDQ_OPSET}; converting the model from opset {current} "
                        f"failed: {_first_line(exc)}") from None
    if not converted.functions:  # the converter drops model-local functions (torch 2's aten_* activations)
        converted.functions.extend(_convert_function(f, QDQ_OPSET) for f in model.functions)
    report.notes.append(f"converted the model from opset {current} to {QDQ_OPSET}")
    return _keep_interface(model, converted)


def _keep_interface(original, derived):
    """``derived`` with the inputs and outputs declared as in ``original``: the version converter's shape inference
    fills in and names their unknown dims ("unk__0")."""
    for field in ("input", "output"):
        del getattr(derived.graph, field)[:]
        getattr(derived.graph, field).extend(getattr(original.graph, field))
    return derived


def with_inferred_shapes(model):
    """``model`` with the shapes ONNX's shape inference finds added to the value_info of its graphs, for the finders
    (the op takes activations of rank >= 2 only, which an undeclared intermediate tensor would not show). Inference
    runs on a skeleton of the model whose large tensors are declarations without data, so that a model stored inside
    the protobuf is not copied. A model the inference cannot handle is returned as it is."""
    import onnx

    from graph_passes.passes.scopes import all_graphs

    skeleton = onnx.ModelProto(ir_version=model.ir_version, graph=_skeleton_graph(model.graph))
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton)
    except Exception:  # noqa: BLE001 - inference errors: the finders then see the declared shapes
        return model
    for graph, found in zip(all_graphs(model.graph), all_graphs(inferred.graph)):
        del graph.value_info[:]
        graph.value_info.extend(found.value_info)
    return model


SKELETON_TENSOR_BYTES = 1024  # larger tensors reach shape inference without their data (shapes need small ones only)


def _skeleton_tensor(t):
    import onnx

    if t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() <= SKELETON_TENSOR_BYTES:
        return t
    light = onnx.TensorProto(name=t.name, data_type=t.data_type, dims=t.dims,
                             data_location=onnx.TensorProto.EXTERNAL)
    light.external_data.add(key="location", value="(not loaded)")
    return light


def _skeleton_graph(graph):
    """A copy of ``graph`` (subgraphs included) whose large initializers and tensor attributes have no data."""
    import onnx

    g = onnx.GraphProto(name=graph.name, input=graph.input, output=graph.output, value_info=graph.value_info,
                        sparse_initializer=graph.sparse_initializer)
    g.initializer.extend(_skeleton_tensor(t) for t in graph.initializer)
    for node in graph.node:
        n = g.node.add(name=node.name, op_type=node.op_type, domain=node.domain, input=node.input,
                       output=node.output)
        for a in node.attribute:
            b = n.attribute.add(name=a.name, type=a.type)
            if a.HasField("g"):
                b.g.CopyFrom(_skeleton_graph(a.g))
            elif a.graphs:
                b.graphs.extend(_skeleton_graph(x) for x in a.graphs)
            elif a.HasField("t"):
                b.t.CopyFrom(_skeleton_tensor(a.t))
            elif a.tensors:
                b.tensors.extend(_skeleton_tensor(x) for x in a.tensors)
            else:
                b.CopyFrom(a)
    return g


def run_passes(model, config: QuantConfig, report: QuantReport):
    """ModelProto -> ModelProto with the configured pass applied (gs round trip)."""
    import onnx_graphsurgeon as gs

    from graph_passes.passes import get_pass
    from graph_passes.passes.checks import keep_overridable_inputs
    from graph_passes.passes.scopes import hoist_shared_initializers

    model = with_inferred_shapes(_prepare_opset(model, config, report))
    graph = gs.import_onnx(model)
    keep_overridable_inputs(model, graph)
    if config.calibration is not None:  # AWQ scales the graph's weights and activations before quantizing
        config.calibration.prepare(graph, config, report)
    get_pass(config.format)(graph, config, report)
    out = gs.export_onnx(graph, do_type_check=False)
    hoist_shared_initializers(out)
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 0)
    out.ir_version = max(model.ir_version, 10 if opset >= 21 else model.ir_version)
    for prop in model.metadata_props:
        out.metadata_props.add().CopyFrom(prop)
    return out


def quantize_model(model_path: str, output_path: str | None, config: QuantConfig, *, force: bool = False,
                   report_path: str | None = None, calib_feeds: list | None = None) -> QuantReport:
    """Quantize the ONNX file ``model_path`` into ``output_path``; the input is never modified. ``calib_feeds``:
    calibration samples (feed dicts), needed by ``config.smooth_alpha``."""
    output_path = output_path or default_output_path(model_path, config)
    model, base_dir, data_files = load_model(model_path)
    outputs = _outputs(model_path, data_files, force)
    fix = "choose another output path (-o)"
    outputs.add(output_path, "output model", fix)
    data_path = output_path + ".data"
    if data_files:
        outputs.add(data_path, "output's external data", fix)
    if report_path:
        outputs.add(report_path, "report", "choose another --report path")
    config = dataclasses.replace(config, external_data_dir=base_dir)  # the caller's config stays as it was
    report = QuantReport(model=model_path, output=output_path, config=_config_dict(config),
                         notes=tensorrt_notes(config))
    report.model_bytes_before = _initializer_bytes(model)
    if config.smooth_alpha is not None or METHODS.get(config.method).needs_calibration:
        from graph_passes.passes.scopes import unique_value_names

        unique_value_names(model)  # calibration and smoothing find activations by name
    if config.smooth_alpha is not None:
        from graph_passes.smoothing import smooth_model

        model, smoothed = smooth_model(model, config, calib_feeds or [], config.smooth_alpha)
        report.notes.append(f"SmoothQuant (alpha {config.smooth_alpha}, {len(calib_feeds or [])} calibration "
                            f"sample(s)): {smoothed.smoothed} layer(s) over {smoothed.tensors} activation tensor(s) "
                            f"smoothed, {smoothed.skipped} left as they are (Gemm, or a weight behind Cast / "
                            f"Transpose)")
    if config.calibration is None and METHODS.get(config.method).needs_calibration:
        from graph_passes.calibration.methods import calibrate

        config.calibration = calibrate(model, config, calib_feeds, base_dir=base_dir, report=report)
    out = run_passes(model, config, report)
    del model
    if not report.rewritten:
        why = "; ".join(f"{len(v)} x {k}" for k, v in report.skip_groups().items()) or "no MatMul, Gemm or Conv node"
        raise UserError(f"{model_path}: no node can be quantized ({why}); nothing written"
                        + (f"; `inspect {model_path}` with the same options lists each node and why"
                           if report.skipped else ""))
    kept = sum(r.act_dtype != config.act_dtype for r in report.rewritten)
    if kept:
        report.notes.append(f"{kept} node(s) compute in their graph's own dtype, not --act-dtype {config.act_dtype} "
                            f"(--act-dtype applies to FP32 graphs)")
    report.model_bytes_after = _initializer_bytes(out)
    report.external_data = bool(data_files) or report.model_bytes_after >= EXTERNAL_DATA_THRESHOLD
    if report.external_data and not data_files:
        outputs.add(data_path, "output's external data", fix)
    with outputs:  # nothing is written before this point
        save_model(out, output_path, outputs, base_dir, report.external_data)
        if report_path:
            outputs.write_text(report_path, report.to_json() + "\n")
        outputs.commit()
    return report


def inspect_model(model_path: str, config: QuantConfig, *, report_path: str | None = None,
                  force: bool = False) -> QuantReport:
    """What :func:`quantize_model` would rewrite and what it would skip, without loading weight values; the summary
    also goes to ``report_path`` as JSON when given (an existing file only with ``force``)."""
    import onnx_graphsurgeon as gs

    from graph_passes.passes._common import op_act_dtype
    from graph_passes.passes.checks import keep_overridable_inputs
    from graph_passes.registry.ops import OPS
    from graph_passes.report import Rewritten

    model, base_dir, data_files = load_model(model_path)
    outputs = _outputs(model_path, data_files, force)
    if report_path:
        outputs.add(report_path, "report", "choose another --report path")
    config = dataclasses.replace(config, external_data_dir=base_dir)
    report = QuantReport(model=model_path, config=_config_dict(config), notes=tensorrt_notes(config))
    report.model_bytes_before = _initializer_bytes(model)
    model = with_inferred_shapes(model)
    graph = gs.import_onnx(model)
    keep_overridable_inputs(model, graph)
    matches, skips = [], []
    for op in OPS:
        found = op.match(graph, config)
        matches += found[0]
        skips += found[1]
    seen = set()
    for m in matches:
        act, casts = op_act_dtype(m, config)
        key = m.key(act)
        report.rewritten.append(Rewritten(node=m.ref.name, pattern=m.pattern, weight=m.source_name, k=m.k, n=m.n,
                                          act_dtype=act, casts=casts, shared=key in seen))
        seen.add(key)
    for s in skips:
        report.skip(s.ref, s.reason, s.detail)
    if report_path:
        with outputs:
            outputs.write_text(report_path, report.to_json() + "\n")
            outputs.commit()
    return report


def tensorrt_notes(config: QuantConfig) -> list[str]:
    """What TensorRT will not take in the Q/DQ output. Its Dequantize operator accepts no zero point other than
    zeros and block (2-D) scales only for INT4 (docs.nvidia.com/deeplearning/tensorrt/operators/docs/Dequantize.html);
    ONNX Runtime runs all of them."""
    if config.format != "qdq":
        return []
    notes = []
    if config.asymmetric:
        notes.append("TensorRT's Dequantize takes no non-zero zero points: this asymmetric Q/DQ model runs in ONNX "
                     "Runtime; for TensorRT use --format plugin")
    if config.bits == 8 and config.group_size != -1:
        notes.append("TensorRT's Dequantize takes block scales for INT4 only: for INT8 in TensorRT use "
                     "--group-size -1 or --format plugin")
    return notes


def _config_dict(config: QuantConfig) -> dict:
    return {"bits": config.bits, "group_size": config.group_size, "asymmetric": config.asymmetric,
            "format": config.format, "act_dtype": config.act_dtype, "include": list(config.include),
            "exclude": list(config.exclude), "min_elements": config.min_elements, "layout": config.layout,
            "method": config.method, "act_mode": config.act_mode, "act_asymmetric": config.act_asymmetric,
            "smooth_alpha": config.smooth_alpha, "fuse_activations": config.fuse_activations}
