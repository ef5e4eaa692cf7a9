"""Real inputs for a model, from a ``.npz`` file or a Python data-loader script, checked against its graph inputs.

    specs = model_input_specs(onnx.load("model.onnx", load_external_data=False))
    feeds = load_npz_feeds("inputs.npz", specs, limit=8)          # [{input name: array}, ...], one dict a sample
    feeds = load_script_feeds("loader.py:load_data", specs)        # FUNC defaults to load_data (polygraphy's name)

``.npz``: one array per graph input, named after it, with a leading sample axis: sample ``i`` is ``array[i]``, which
keeps the model's own batch axis (an input ``[batch, seq]`` is stored ``[samples, batch, seq]``). Script: ``FUNC()``
returns an iterable of feed dicts ``{input name: array}`` (a generator is read only as far as ``limit``).
Each sample must name exactly the model's inputs, with the model's rank and fixed dims, and the same kind of
number (float, signed / unsigned integer, bool); within a kind the values are cast to the model's dtype (float64
-> float32, int32 -> int64; integers must fit). Anything else is a :class:`UserError` naming the file and the input.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import sys
from dataclasses import dataclass

import numpy as np

from graph_passes.errors import UserError

DEFAULT_SCRIPT_FUNC = "load_data"


@dataclass(frozen=True)
class InputSpec:
    """A graph input: name, numpy dtype, dims (int fixed, str named dynamic, None unnamed dynamic)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...]

    @property
    def shown(self) -> list:
        """The dims as messages show them: sizes and names, ``?`` for an unnamed dynamic dim."""
        return ["?" if d is None else d for d in self.shape]


def model_input_specs(model) -> list[InputSpec]:
    """The graph inputs of ``model`` (an onnx.ModelProto) that are not initializers, in graph order."""
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    specs = []
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except (KeyError, TypeError, ValueError):
            raise UserError(f"input {inp.name}: element type {tt.elem_type} is not a numpy type") from None
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
        specs.append(InputSpec(inp.name, dtype, dims))
    return specs


def _kind(dtype: np.dtype) -> str:
    """'f' float (bfloat16 included), 'i' signed, 'u' unsigned, 'b' bool; what must match between data and model."""
    return "f" if dtype.name == "bfloat16" else dtype.kind


def _fit(source: str, name: str, value, spec: InputSpec) -> np.ndarray:
    """``value`` as an array of ``spec``'s dtype, or a UserError saying what does not match."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - whatever the script returned
        raise UserError(f"{source}: input {name}: not an array ({type(exc).__name__}: {exc})") from None
    if _kind(arr.dtype) != _kind(spec.dtype):
        raise UserError(f"{source}: input {name}: {arr.dtype} data for a {spec.dtype} input; give "
                        f"{spec.dtype} values (only casts within floats or within integers are made)")
    if arr.ndim != len(spec.shape) or any(isinstance(d, int) and d != a for d, a in zip(spec.shape, arr.shape)):
        raise UserError(f"{source}: input {name}: shape {list(arr.shape)} does not match the model's {spec.shown}")
    if arr.dtype == spec.dtype:
        return arr
    if spec.dtype.kind in "iu" and arr.size:
        info = np.iinfo(spec.dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise UserError(f"{source}: input {name}: values {arr.min()}..{arr.max()} do not fit {spec.dtype}")
    with np.errstate(over="ignore"):
        out = arr.astype(spec.dtype)
    if _kind(spec.dtype) == "f" and np.isfinite(arr).all() and not np.isfinite(out.astype(np.float32)).all():
        raise UserError(f"{source}: input {name}: values overflow {spec.dtype}")
    return out


def _check_names(source: str, names, specs: list[InputSpec]) -> None:
    wanted = [s.name for s in specs]
    missing = [n for n in wanted if n not in names]
    extra = sorted(set(names) - set(wanted))
    if missing:
        raise UserError(f"{source}: no array for input {missing[0]}; the model's inputs are "
                        f"{', '.join(wanted)}")
    if extra:
        raise UserError(f"{source}: {extra[0]} is not a data input of the model (a graph input without an "
                        f"initializer); its data inputs are {', '.join(wanted)}")


def _check_limit(limit: int | None, option: str = "limit") -> None:
    if limit is not None and limit < 1:
        raise UserError(f"{option} {limit}: must be >= 1")


def _npz_path(path) -> str:
    """``path`` when it is an existing .npz (or .npy) file by its first bytes; else a UserError saying how to make one
    (numpy would try an unknown file as a pickle and suggest allow_pickle)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file")
    with open(path, "rb") as f:
        magic = f.read(6)
    if not magic.startswith((b"PK", b"\x93NUMPY")):
        raise UserError(f"{path}: not an .npz file; save one array per input with numpy.savez(path, name=array)")
    return path


def _script_path(spec) -> tuple[str, str]:
    """(file, function) of ``FILE.py[:FUNC]``; UserError when the file does not exist."""
    path, func_name = _parse_script_spec(os.fspath(spec))
    if not os.path.isfile(path):
        raise UserError(f"{path}: no such file (expected FILE.py or FILE.py:FUNC)")
    return path, func_name


def check_sources(npz: str | None, script: str | None, options: tuple[str, str] = ("--data", "--data-script")) -> None:
    """The checks of :func:`load_feeds` that need no model: one source at most, and it exists. A command runs them
    before anything slow or anything that may be missing (TensorRT), so a wrong path is reported first."""
    if npz and script:
        raise UserError(f"give {options[0]} or {options[1]}, not both")
    if npz:
        _npz_path(npz)
    if script:
        _script_path(script)


def load_npz_feeds(path: str, specs: list[InputSpec], limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """Samples from ``path`` (see the module docstring); at most ``limit`` of them."""
    _check_limit(limit)
    path = _npz_path(path)
    try:
        npz = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - BadZipFile, ValueError, OSError...
        raise UserError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise UserError(f"{path}: a single .npy array; save one array per input with numpy.savez(path, name=array)")
    with npz:
        _check_names(path, npz.files, specs)
        arrays = {}
        for s in specs:
            try:
                arr = npz[s.name]
            except ValueError as exc:
                if "allow_pickle" not in str(exc):
                    raise UserError(f"{path}: input {s.name}: cannot read the array (ValueError: {exc})") from None
                raise UserError(f"{path}: input {s.name}: an array of Python objects (samples of different shapes?); "
                                f"an .npz holds samples of one shape per input: give the others from a data script "
                                f"(FILE.py)") from None
            except Exception as exc:  # noqa: BLE001 - a truncated member
                raise UserError(f"{path}: input {s.name}: cannot read the array ({type(exc).__name__}: {exc})") \
                    from None
            if arr.ndim == 0 or arr.shape[0] == 0:
                raise UserError(f"{path}: input {s.name}: no samples (shape {list(arr.shape)}); the first axis "
                                f"counts the samples")
            if arr.ndim == len(s.shape):
                raise UserError(f"{path}: input {s.name}: shape {list(arr.shape)} has the model's rank {arr.ndim}, but "
                                f"the first axis counts the samples: save {s.name}[None] for one sample")
            arrays[s.name] = arr
    counts = {n: a.shape[0] for n, a in arrays.items()}
    if len(set(counts.values())) > 1:
        raise UserError(f"{path}: the inputs hold different numbers of samples (first axis): "
                        + ", ".join(f"{n} {c}" for n, c in counts.items()))
    n = next(iter(counts.values())) if counts else 0
    if n == 0:
        raise UserError(f"{path}: no samples")
    n = n if limit is None else min(n, limit)
    return [{s.name: _fit(f"{path} (sample {i})", s.name, arrays[s.name][i], s) for s in specs} for i in range(n)]


def _parse_script_spec(spec: str) -> tuple[str, str]:
    path, sep, func = spec.rpartition(":")
    if sep and func.isidentifier() and path:
        return path, func
    return spec, DEFAULT_SCRIPT_FUNC


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def _folder_on_path(script: str):
    """The script's folder first on sys.path, as ``python FILE.py`` has it: a loader imports the helpers beside it."""
    folder = os.path.dirname(os.path.abspath(script))
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def load_script_feeds(spec: str, specs: list[InputSpec], limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """Samples from ``FILE.py[:FUNC]`` (see the module docstring); at most ``limit`` of them."""
    _check_limit(limit)
    path, func_name = _script_path(spec)
    mod_name = f"_trt_woq_data_{abs(hash(os.path.abspath(path)))}"
    try:
        mspec = importlib.util.spec_from_file_location(mod_name, path)
        if mspec is None or mspec.loader is None:
            raise ImportError("not a Python file")
        module = importlib.util.module_from_spec(mspec)
        sys.modules[mod_name] = module  # dataclasses and pickling inside the script look their module up
        try:
            with _folder_on_path(path):
                mspec.loader.exec_module(module)
        finally:
            sys.modules.pop(mod_name, None)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the script's own errors, reported in one line
        raise UserError(f"{path}: the data script failed to import: {_one_line(exc)}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UserError(f"{path}: no function {func_name}() in the script (give FILE.py:FUNC)")
    source = f"{path}:{func_name}"
    feeds = []
    try:
        with _folder_on_path(path):  # a generator may import its helpers late
            items = func()
            if hasattr(items, "keys"):
                raise UserError(f"{source}: returned one dict: return a list of feed dicts ([feed] for one sample) "
                                f"or yield each")
            if not hasattr(items, "__iter__"):
                raise UserError(f"{source}: returned {type(items).__name__}, not an iterable of feed dicts")
            iterator = iter(items)
            for i, feed in enumerate(itertools.islice(iterator, limit)):
                where = f"{source} (sample {i})"
                if not hasattr(feed, "keys") or not hasattr(feed, "__getitem__"):
                    raise UserError(f"{where}: expected a dict {{input name: array}}, got {type(feed).__name__}")
                _check_names(where, list(feed.keys()), specs)
                feeds.append({s.name: _fit(where, s.name, feed[s.name], s) for s in specs})
    except UserError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the script's own errors, reported in one line
        raise UserError(f"{source}: the data script failed: {_one_line(exc)}") from None
    if not feeds:
        raise UserError(f"{source}: returned no samples")
    return feeds


def load_feeds(npz: str | None, script: str | None, specs: list[InputSpec], limit: int | None = None,
               options: tuple[str, str, str] = ("--data", "--data-script", "--samples")
               ) -> list[dict[str, np.ndarray]] | None:
    """The samples of an .npz file or of a data script (None when neither is given); ``options`` names the
    command-line options of the two sources and of ``limit`` in the one-line errors."""
    check_sources(npz, script, options[:2])
    _check_limit(limit, options[2])
    if npz:
        return load_npz_feeds(npz, specs, limit)
    if script:
        return load_script_feeds(script, specs, limit)
    return None
