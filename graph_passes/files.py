"""The files a command reads and writes, and the rules that keep the user's files safe.

* Inputs: the model file and every external data file it references. :func:`external_data_files` checks each
  reference itself (inside the model's folder, a regular file, offset + length within it) before anything reads it.
* Outputs (:class:`Outputs`): an output model, its external data file and a report are compared as FILES (links
  resolved, ``os.path.samefile`` where both exist) with the inputs and with each other; a folder, a FIFO or a
  device is refused, an existing file too unless ``force``. Everything is written under temporary names in the target
  folders first and renamed into place only once all of it is written, so that an error leaves nothing new behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from graph_passes.errors import UserError

_SUB_BYTE_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2, "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}


def check_model_path(path: str) -> None:
    """UserError unless ``path`` names an existing file (what a model must be before anything parses it)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UserError(f"{path}: is a folder, expected an .onnx file")


def external_data_files(model, path: str) -> list[str]:
    """The real paths of the external data files ``model`` (stored at ``path``) reads, after checking every reference
    itself, without relying on the ONNX checker: a relative location inside the model's folder (no ``..``, no
    absolute path, no link leading out), a regular file, and offset + length within it and matching the tensor."""
    base = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    files = []
    for t in all_tensors(model.graph):
        if t.data_location != t.EXTERNAL:
            continue
        where = f"{path}: external data of tensor {t.name!r}"
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        if not location or "\0" in location:
            raise UserError(f"{where}: location {location!r} is not a file name")
        if os.path.isabs(location) or location.startswith(("/", "\\")):
            raise UserError(f"{where}: absolute path {location!r}; external data must be a file beside the model")
        if ".." in location.replace("\\", "/").split("/"):
            raise UserError(f"{where}: {location!r} points outside the model's folder {base}")
        full = os.path.join(base, location)
        real = os.path.realpath(full)
        if real == base or os.path.commonpath([base, real]) != base:
            raise UserError(f"{where}: {location!r} is a link to {real}, outside the model's folder {base}")
        if not os.path.lexists(full):
            raise UserError(f"{where}: file {location!r} is missing (expected beside the model in {base})")
        if not os.path.isfile(real):
            raise UserError(f"{where}: {location!r} is not a file")
        _check_extent(t, info, real, where)
        if real not in files:
            files.append(real)
    return files


def _check_extent(t, info: dict, real: str, where: str) -> None:
    import onnx

    try:
        offset, length = int(info.get("offset", 0)), int(info["length"]) if "length" in info else None
    except ValueError:
        raise UserError(f"{where}: offset / length are not integers") from None
    if offset < 0 or (length is not None and length < 0):
        raise UserError(f"{where}: negative offset ({offset}) or length ({length})")
    count = 1
    for d in t.dims:
        count *= max(0, d)
    name = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in onnx.TensorProto.DataType.values() else ""
    if name in _SUB_BYTE_BITS:
        need = (count * _SUB_BYTE_BITS[name] + 7) // 8
    else:
        try:
            need = count * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except Exception:  # noqa: BLE001 - STRING / unknown types: only the declared length can be checked
            need = length or 0
    if length is not None and length != need:
        raise UserError(f"{where}: declares {length} bytes, its shape {list(t.dims)} and type {name or t.data_type} "
                        f"need {need}")
    size = os.path.getsize(real)
    if offset > size:
        raise UserError(f"{where}: offset {offset} is past the end of {os.path.basename(real)} ({size} bytes)")
    if offset + need > size:
        raise UserError(f"{where}: {os.path.basename(real)} is shorter than declared: the tensor needs bytes "
                        f"{offset}..{offset + need}, the file has {size}")


def all_tensors(graph):
    """Initializers and tensor attributes of ``graph`` and of its subgraphs."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from all_tensors(g)


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (through links, hard links, ``..``, ``//``)."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _name_max(folder: str) -> int:
    """The longest file name ``folder`` takes, in bytes (255 where the system does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows) or no answer for this file system
        return 255


class Outputs:
    """The files one command writes. ``add`` checks a target against the inputs and the targets before it;
    ``path_for`` is where to write it; ``commit`` renames everything into place; ``discard`` (also on leaving a
    ``with`` block without a commit) removes what was written."""

    def __init__(self, inputs: list[tuple[str, str]], force: bool):
        self.inputs = inputs    # (path, what it is), e.g. ("m.onnx", "input model")
        self.force = force
        self.targets: list[tuple[str, str]] = []
        self._tmp_dirs: dict[str, str] = {}

    def add(self, path: str, what: str, fix: str) -> None:
        """Refuses ``path`` as the ``what`` (e.g. "report") with a message ending in ``fix`` when it is unsafe."""
        if os.path.isdir(path) or path.endswith(("/", os.sep)):
            raise UserError(f"{path}: is a folder; {fix}")
        self.refuse_inputs(path, fix)
        for other, other_what in self.targets:
            if same_file(path, other):
                raise UserError(f"{path}: is also the {other_what}; {fix}")
        if os.path.exists(path) and not os.path.isfile(path):  # a FIFO or a device (/dev/null): never replaced
            raise UserError(f"{path}: is not a regular file; {fix}")
        if os.path.lexists(path) and not self.force:
            raise UserError(f"{path}: already exists; pass --force to overwrite it")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise UserError(f"{path}: output folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise UserError(f"{path}: output folder {folder} is not writable")
        name_max = _name_max(folder)
        if len(os.fsencode(os.path.basename(path))) > name_max:
            raise UserError(f"{path}: file name longer than {name_max} bytes, the most {folder} takes; {fix}")
        self.targets.append((path, what))

    def refuse_inputs(self, path: str, fix: str) -> None:
        """Refuses ``path`` when it is one of the input files (also for a file written in place, e.g. a cache)."""
        for other, other_what in self.inputs:
            if same_file(path, other):
                raise UserError(f"{path}: is the {other_what}; {fix}")

    def path_for(self, path: str) -> str:
        """The temporary path to write target ``path`` at: same name, in a hidden folder beside it."""
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in self._tmp_dirs:
            try:
                self._tmp_dirs[folder] = tempfile.mkdtemp(prefix=".trt-woq-", dir=folder)
            except OSError as exc:
                raise UserError(f"{path}: cannot write in {folder}: {exc.strerror}") from None
        return os.path.join(self._tmp_dirs[folder], os.path.basename(path))

    def write_text(self, path: str, text: str) -> None:
        try:
            with open(self.path_for(path), "w") as f:
                f.write(text)
        except OSError as exc:
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Renames every written target into place; when one rename fails, the ones done that created a new file are
        removed again (a replaced file cannot come back, which is why nothing is renamed before all is written)."""
        done = []
        try:
            for path, _ in self.targets:
                tmp = self.path_for(path)
                if os.path.exists(tmp):
                    existed = os.path.lexists(path)
                    os.replace(tmp, path)
                    done.append((path, existed))
        except OSError as exc:
            for path, existed in done:
                if not existed:
                    os.unlink(path)
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
        finally:
            self.discard()

    def discard(self) -> None:
        for folder in self._tmp_dirs.values():
            shutil.rmtree(folder, ignore_errors=True)
        self._tmp_dirs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.discard()
