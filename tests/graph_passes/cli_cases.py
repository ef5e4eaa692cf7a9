"""The generated cases of the CLI fuzz test (test_fuzz.py), and the file helpers test_main.py shares with it.

A case maker gets (rng, folder), writes its input files into ``folder`` and returns the argv lists to run: model,
outputs and reports all live in the folder, so listing it before and after a run shows everything a run touched.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import woq_models as models

K = N = 128  # one group of the default size: small models keep the whole battery fast


def sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def tree(folder) -> dict:
    """Every file under ``folder`` with its hash (links by their target, folders as "dir")."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, folder)
            out[rel] = ("link", os.readlink(p)) if os.path.islink(p) else sha(p) if os.path.isfile(p) else "dir"
    return out


# ---------------------------------------------------------------------------------------------------- model makers
def _mlp(rng):
    return models.mlp(rng, k=K, hidden=N)


def _save(model, path) -> None:
    """Saves without the checker: many cases are invalid on purpose."""
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def _graph(nodes, inputs, outputs, inits, opset=17, ir=8):
    model = helper.make_model(helper.make_graph(nodes, "fuzz", inputs, outputs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _matmul(w, x_type=TensorProto.FLOAT, x_dims=("B", K), y_dims=("B", N), name="mm", out_type=None):
    """y = x @ w with ``w`` any array (dtype and rank are the fuzzed part)."""
    vi = helper.make_tensor_value_info
    return _graph([helper.make_node("MatMul", ["x", "w"], ["y"], name=name)], [vi("x", x_type, list(x_dims))],
                  [vi("y", out_type or x_type, list(y_dims))], [numpy_helper.from_array(np.asarray(w), "w")])


def _gemm(rng, **attrs):
    vi = helper.make_tensor_value_info
    w = models.weight(rng, K, N)
    return _graph([helper.make_node("Gemm", ["x", "w"], ["y"], name="gemm", **attrs)],
                  [vi("x", TensorProto.FLOAT, ["B", K])], [vi("y", TensorProto.FLOAT, ["B", N])],
                  [numpy_helper.from_array(w, "w")])


def _raw_tensor(name, dims, raw):
    """A float tensor whose dims and bytes need not agree (the helper refuses to build one)."""
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, raw_data=raw)
    t.dims.extend(dims)
    return t


def ext_model(rng, folder, model=None, data="m.data"):
    """``model`` (default an MLP) saved as m.onnx with every initializer in ``data``; returns the model path."""
    onnx.save_model(model or _mlp(rng), folder / "m.onnx", save_as_external_data=True, location=data,
                    size_threshold=0)
    return folder / "m.onnx"


def _edit_external(path, **fields) -> None:
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        keep = [e for e in t.external_data if e.key not in fields]
        del t.external_data[:]
        t.external_data.extend(keep)
        for key, value in fields.items():
            if value is not None:
                t.external_data.add(key=key, value=str(value))
    _save(model, path)


# ------------------------------------------------------------------------------------------------------ the cases
# Each maker gets (rng, folder) and returns the argv lists to run on the model it wrote into folder: the model path
# and outputs are placed in the folder, so "before / after" listings cover everything a run could touch.
def _q(model, *extra, out="q.onnx"):
    return ["quantize", str(model), "-o", str(model.parent / out), "-q", *extra]


def _three(model):
    """quantize, inspect and compare (the model against itself) of ``model``."""
    return [_q(model), ["inspect", str(model)], ["compare", str(model), str(model)]]


def _truncated(frac):
    def make(rng, folder):
        data = _mlp(rng).SerializeToString()
        cut = int(len(data) * frac) + int(rng.integers(0, 7))
        (folder / "m.onnx").write_bytes(data[:cut])
        return _three(folder / "m.onnx")
    return make


def _flipped(n_bytes):
    def make(rng, folder):
        data = bytearray(_mlp(rng).SerializeToString())
        for i in rng.integers(0, len(data), n_bytes):
            data[i] = int(rng.integers(0, 256))
        (folder / "m.onnx").write_bytes(bytes(data))
        return _three(folder / "m.onnx")
    return make


def _garbage(rng, folder):
    (folder / "m.onnx").write_bytes(rng.integers(0, 256, int(rng.integers(0, 4096)), dtype=np.uint8).tobytes())
    return _three(folder / "m.onnx")


def _weight_dtype(dtype):
    def make(rng, folder):
        w = models.weight(rng, K, N)
        w = (w * 100).astype(dtype) if np.dtype(dtype).kind in "iubU" else w.astype(dtype)
        _save(_matmul(w), folder / "m.onnx")
        return _three(folder / "m.onnx")
    return make


def _activation_dtype(x_type):
    def make(rng, folder):
        _save(_matmul(models.weight(rng, K, N), x_type=x_type), folder / "m.onnx")
        return _three(folder / "m.onnx")
    return make


def _weight_shape(shape):
    def make(rng, folder):
        w = rng.standard_normal(shape).astype(np.float32) * 0.05
        _save(_matmul(w, y_dims=("B", shape[-1] if shape else N)), folder / "m.onnx")
        return _three(folder / "m.onnx")
    return make


def _activation_rank(dims):
    def make(rng, folder):
        _save(_matmul(models.weight(rng, K, N), x_dims=dims, y_dims=dims[:-1] + (N,)), folder / "m.onnx")
        return _three(folder / "m.onnx")
    return make


def _weight_values(kind):
    def make(rng, folder):
        w = models.weight(rng, K, N)
        if kind == "nan":
            w[rng.integers(0, K), rng.integers(0, N)] = np.nan
        elif kind == "inf":
            w[rng.integers(0, K), rng.integers(0, N)] = -np.inf
        elif kind == "huge":
            w[rng.integers(0, K), rng.integers(0, N)] = 3e38
        elif kind == "tiny":
            w *= 1e-13
        elif kind == "zeros":
            w[:] = 0
        elif kind == "subnormal":
            w[:] = 1e-40
        elif kind == "outlier_row":
            w[rng.integers(0, K)] = 1e4
        _save(_matmul(w), folder / "m.onnx")
        return [*_three(folder / "m.onnx"), _q(folder / "m.onnx", "--act-dtype", "bf16", "--force")]
    return make


def _gemm_attrs(attrs):
    def make(rng, folder):
        _save(_gemm(rng, **attrs), folder / "m.onnx")
        return _three(folder / "m.onnx")
    return make


def _odd_graph(kind):
    def make(rng, folder):
        vi = helper.make_tensor_value_info
        w = numpy_helper.from_array(models.weight(rng, K, N), "w")
        x, y = vi("x", TensorProto.FLOAT, ["B", K]), vi("y", TensorProto.FLOAT, ["B", N])
        mm = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
        if kind == "no_nodes":
            model = _graph([], [x], [x], [w])
        elif kind == "no_opset":
            model = _graph([mm], [x], [y], [w])
            del model.opset_import[:]
        elif kind == "ir0":
            model = _graph([mm], [x], [y], [w], ir=0)
        elif kind == "future_opset":
            model = _graph([mm], [x], [y], [w], opset=99)
        elif kind == "old_opset":
            model = _graph([mm], [x], [y], [w], opset=7, ir=3)
        elif kind == "dup_outputs":  # two graph outputs with one name
            model = _graph([mm], [x], [y, y], [w])
        elif kind == "output_is_initializer":
            model = _graph([mm], [x], [y, vi("w", TensorProto.FLOAT, [K, N])], [w])
        elif kind == "dup_node_outputs":  # two nodes produce "y"
            model = _graph([mm, helper.make_node("MatMul", ["x", "w"], ["y"], name="mm2")], [x], [y], [w])
        elif kind == "dup_node_names":
            mm2 = helper.make_node("MatMul", ["x", "w"], ["y2"], name="mm")
            model = _graph([mm, mm2], [x], [y, vi("y2", TensorProto.FLOAT, ["B", N])], [w])
        elif kind == "init_is_input":  # an overridable weight
            model = _graph([mm], [x, vi("w", TensorProto.FLOAT, [K, N])], [y], [w])
        elif kind == "dangling_input":
            model = _graph([helper.make_node("MatMul", ["x", "nowhere"], ["y"], name="mm")], [x], [y], [w])
        elif kind == "cycle":
            model = _graph([helper.make_node("MatMul", ["z", "w"], ["y"], name="a"),
                            helper.make_node("Relu", ["y"], ["z"], name="b")], [x], [y], [w])
        elif kind == "unknown_op":
            model = _graph([helper.make_node("Frobnicate", ["x"], ["h"], name="f"),
                            helper.make_node("MatMul", ["h", "w"], ["y"], name="mm")], [x], [y], [w])
        elif kind == "shared_name_clash":  # a tensor named like what the pass generates
            named = numpy_helper.from_array(models.weight(rng, K, N), "mm_packed")
            model = _graph([mm, helper.make_node("MatMul", ["x", "mm_packed"], ["y2"], name="mm_b")], [x],
                           [y, vi("y2", TensorProto.FLOAT, ["B", N])], [w, named])
        elif kind == "empty_names":
            model = _graph([helper.make_node("MatMul", ["x", "w"], ["y"]),
                            helper.make_node("MatMul", ["x", "w"], ["y2"])], [x],
                           [y, vi("y2", TensorProto.FLOAT, ["B", N])], [w])
        elif kind == "zero_k":
            model = _matmul(np.zeros((0, N), np.float32), x_dims=("B", 0))
        elif kind == "weight_from_constant_node":
            const = helper.make_node("Constant", [], ["wc"], name="c",
                                     value=numpy_helper.from_array(models.weight(rng, K, N), "v"))
            model = _graph([const, helper.make_node("MatMul", ["x", "wc"], ["y"], name="mm")], [x], [y], [])
        elif kind == "int4_weight":
            model = _graph([mm], [x], [y], [_raw_tensor("w", [K, N], b"\x12" * (K * N // 2))])
            model.graph.initializer[0].data_type = TensorProto.INT4
        elif kind == "no_graph_outputs":
            model = _graph([mm], [x], [], [w])
        elif kind == "bad_transpose_perm":
            model = _graph([helper.make_node("Transpose", ["w"], ["wt"], name="t", perm=[0, 0]),
                            helper.make_node("MatMul", ["x", "wt"], ["y"], name="mm")], [x], [y], [w])
        elif kind == "raw_data_short":
            w.raw_data = w.raw_data[:100]
            model = _graph([mm], [x], [y], [w])
        elif kind == "huge_dims":
            model = _graph([mm], [x], [y], [_raw_tensor("w", [2**40, 2], b"\0" * 16)])
        elif kind == "negative_dims":
            model = _graph([mm], [x], [y], [_raw_tensor("w", [-1, N], b"")])
        else:
            raise AssertionError(kind)
        _save(model, folder / "m.onnx")
        return _three(folder / "m.onnx")
    return make


def external(kind):
    def make(rng, folder):
        model = ext_model(rng, folder)
        data = folder / "m.data"
        if kind == "short":  # the last tensor lacks its last bytes
            data.write_bytes(data.read_bytes()[:-int(rng.integers(1, 17))])
        elif kind == "empty":
            data.write_bytes(b"")
        elif kind == "offset_past_end":
            _edit_external(model, offset=data.stat().st_size + int(rng.integers(1, 1 << 20)))
        elif kind == "length_mismatch":
            _edit_external(model, length=int(rng.integers(1, 1000)))
        elif kind == "negative_offset":
            _edit_external(model, offset=-int(rng.integers(1, 100)))
        elif kind == "offset_not_int":
            _edit_external(model, offset="abc")
        elif kind == "no_location":
            _edit_external(model, location=None)
        elif kind == "dotdot":
            os.mkdir(folder / "sub")
            os.rename(model, folder / "sub" / "m.onnx")
            model = folder / "sub" / "m.onnx"
            _edit_external(model, location="../m.data")
        elif kind == "absolute":
            _edit_external(model, location=str(data))
        elif kind == "link_out":
            os.mkdir(folder / "sub")
            os.rename(model, folder / "sub" / "m.onnx")
            model = folder / "sub" / "m.onnx"
            os.symlink(data, folder / "sub" / "m.data")
        elif kind == "missing":
            data.unlink()
        elif kind == "folder":
            data.unlink()
            data.mkdir()
        elif kind == "points_at_model":
            _edit_external(model, location="m.onnx")
        elif kind == "location_nul":
            _edit_external(model, location="m.data\0x")
        elif kind == "dot_slash":  # allowed: still beside the model
            _edit_external(model, location="./m.data")
        elif kind == "backslash_dotdot":
            _edit_external(model, location="..\\m.data")
        elif kind == "dotdot_inside":
            _edit_external(model, location="sub/../m.data")
        elif kind == "offset_shifted":
            _edit_external(model, offset=int(rng.integers(1, 64)))
        elif kind == "length_too_big":
            _edit_external(model, length=data.stat().st_size * 2)
        elif kind == "one_tensor_elsewhere":
            m = onnx.load(str(model), load_external_data=False)
            next(e for e in m.graph.initializer[-1].external_data if e.key == "location").value = "other.data"
            _save(m, model)
        elif kind == "link_inside":  # allowed: the link stays in the model's folder
            os.rename(data, folder / "real.data")
            os.symlink("real.data", data)
        elif kind == "good":
            pass
        else:
            raise AssertionError(kind)
        return _three(model)
    return make


def _paths(kind):
    """Output and report paths colliding with inputs, outputs and folders, plain and through links."""
    def make(rng, folder):
        if kind.startswith("ext_"):
            model = ext_model(rng, folder, data="q.onnx.data")  # the default -o q.onnx would write q.onnx.data
        elif kind.startswith("ext2_"):
            model = ext_model(rng, folder)  # external data m.data; the output's is q.onnx.data
        else:
            model = folder / "m.onnx"
            _save(_mlp(rng), model)
        (folder / "dir").mkdir()
        os.symlink(folder, folder / "self")
        os.symlink(model.name, folder / "m_link.onnx")
        (folder / "old.json").write_text("{}\n")
        os.symlink(folder / "nowhere", folder / "dangling.onnx")
        os.link(model, folder / "m_hard.onnx")
        os.mkfifo(folder / "fifo")
        cases = {
            "out_is_input": [_q(model, out="m.onnx"), _q(model, "--force", out="m.onnx")],
            "out_via_folder_link": [_q(model, "--force", out="self/m.onnx")],
            "out_via_file_link": [_q(model, "--force", out="m_link.onnx")],
            "out_is_folder": [_q(model, "--force", out="dir")],
            "out_in_missing_folder": [_q(model, out="nope/q.onnx")],
            "out_trailing_slash": [["quantize", str(model), "-o", f"{folder}/{d}/", "-q", "--force"]
                                   for d in ("nope", "dir")],
            "out_is_fifo": [_q(model, "--force", out="fifo"),
                            ["inspect", str(model), "--report", str(folder / "fifo"), "--force"]],
            "out_empty": [["quantize", str(model), "-o", "", "-q"]],
            "report_empty": [_q(model, "--report", ""), ["inspect", str(model), "--report", ""]],
            "out_under_a_file": [_q(model, out="m.onnx/q.onnx")],
            "report_is_input": [_q(model, "--report", str(model), "--force"),
                                ["inspect", str(model), "--report", str(model), "--force"]],
            "report_via_link": [["inspect", str(model), "--report", str(folder / "self" / "m.onnx"), "--force"],
                                _q(model, "--report", str(folder / "m_link.onnx"), "--force")],
            "report_is_output": [_q(model, "--report", str(folder / "q.onnx")),
                                 _q(model, "--report", str(folder / "self" / "q.onnx"), "--force")],
            "ext2_report_is_output_data": [_q(model, "--report", str(folder / "q.onnx.data"))],
            "ext2_out_is_input_data": [_q(model, "--force", out="m.data")],
            "out_is_dangling_link": [_q(model, out="dangling.onnx")],
            "out_is_hard_link": [_q(model, "--force", out="m_hard.onnx")],
            "report_is_hard_link": [["inspect", str(model), "--report", str(folder / "m_hard.onnx"), "--force"]],
            "report_spelled_differently": [_q(model, "--report", str(folder / "dir" / ".." / "q.onnx")),
                                           _q(model, "--report", str(folder / "." / "q.onnx"), "--force")],
            "report_is_folder": [_q(model, "--report", str(folder / "dir"), "--force"),
                                 ["inspect", str(model), "--report", str(folder / "dir"), "--force"]],
            "report_exists": [["inspect", str(model), "--report", str(folder / "old.json")],
                              _q(model, "--report", str(folder / "old.json"))],
            "ext_out_data_is_input_data": [_q(model), _q(model, "--force")],
            "ext_report_is_input_data": [["inspect", str(model), "--report", str(folder / "q.onnx.data"),
                                          "--force"]],
        }
        return cases[kind]
    return make


CASES = {}
for i in range(16):
    CASES[f"truncated_{i}"] = _truncated(i / 16)
for i in range(16):
    CASES[f"flipped_{i}"] = _flipped(1 + 2 * i)
for i in range(8):
    CASES[f"garbage_{i}"] = _garbage
for name in ("float64", "float16", "int32", "int8", "uint8", "bool", "int64", "str"):
    CASES[f"weight_dtype_{name}"] = _weight_dtype(name)
for name in ("FLOAT16", "BFLOAT16", "DOUBLE", "INT32", "INT64", "UINT8", "BOOL"):
    CASES[f"activation_dtype_{name}"] = _activation_dtype(getattr(TensorProto, name))
for shape in ((N,), (2, K, N), (1, 1, K, N), (), (K, 1), (K, 3), (64, N), (K + 1, N)):
    CASES[f"weight_shape_{'x'.join(map(str, shape)) or 'scalar'}"] = _weight_shape(shape)
for dims in ((K,), (1, 2, 1, 3, K), (0, K), (1, K), ("B", "S", K)):
    CASES[f"activation_rank_{'x'.join(map(str, dims))}"] = _activation_rank(dims)
for kind in ("nan", "inf", "huge", "tiny", "zeros", "subnormal", "outlier_row"):
    CASES[f"weight_values_{kind}"] = _weight_values(kind)
for i, attrs in enumerate([{"transA": 1}, {"transB": 5}, {"transB": 1}, {"alpha": float("nan")},
                           {"alpha": float("inf")}, {"alpha": 0.0}, {"beta": -1.0}, {"frobnicate": 3},
                           {"transB": 1.5}, {"alpha": "big"}, {"transA": 1, "transB": 1}]):
    CASES[f"gemm_attrs_{i}"] = _gemm_attrs(attrs)
for kind in ("no_nodes", "no_opset", "ir0", "future_opset", "old_opset", "dup_outputs", "output_is_initializer",
             "dup_node_outputs", "dup_node_names", "init_is_input", "dangling_input", "cycle", "unknown_op",
             "shared_name_clash", "empty_names", "zero_k", "weight_from_constant_node", "raw_data_short",
             "huge_dims", "negative_dims", "int4_weight", "no_graph_outputs", "bad_transpose_perm"):
    CASES[f"graph_{kind}"] = _odd_graph(kind)
for kind in ("short", "empty", "offset_past_end", "length_mismatch", "negative_offset", "offset_not_int",
             "no_location", "dotdot", "absolute", "link_out", "missing", "folder", "points_at_model",
             "location_nul", "dot_slash", "backslash_dotdot", "dotdot_inside", "offset_shifted", "length_too_big",
             "one_tensor_elsewhere", "link_inside", "good"):
    CASES[f"external_{kind}"] = external(kind)
for kind in ("out_is_input", "out_via_folder_link", "out_via_file_link", "out_is_folder", "out_in_missing_folder",
             "out_trailing_slash", "out_empty", "report_empty", "out_is_fifo",
             "out_under_a_file", "report_is_input", "report_via_link", "report_is_output",
             "report_is_folder", "report_exists", "ext_out_data_is_input_data", "ext_report_is_input_data",
             "ext2_report_is_output_data", "ext2_out_is_input_data", "out_is_dangling_link", "out_is_hard_link",
             "report_is_hard_link", "report_spelled_differently"):
    CASES[f"paths_{kind}"] = _paths(kind)
# Paths cases that must be refused (exit 2), whatever the model.
MUST_REFUSE = {k for k in CASES if k.startswith("paths_")}
