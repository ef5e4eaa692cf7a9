"""graph_passes.files: the same-file test and the staged, all-or-nothing writes (the CLI cases are in test_main and
test_fuzz)."""

from __future__ import annotations

import os

import pytest

from graph_passes import UserError
from graph_passes.files import Outputs, same_file


def test_same_file(tmp_path):
    a = tmp_path / "a.onnx"
    a.write_text("a")
    os.symlink(a, tmp_path / "link.onnx")
    os.link(a, tmp_path / "hard.onnx")
    os.symlink(tmp_path, tmp_path / "here")
    for alias in ("link.onnx", "hard.onnx", "here/a.onnx", "sub/../a.onnx", "./a.onnx"):
        assert same_file(str(tmp_path / alias), str(a)), alias
    (tmp_path / "b.onnx").write_text("a")  # same bytes, another file
    assert not same_file(str(tmp_path / "b.onnx"), str(a))
    assert same_file(str(tmp_path / "here" / "new.onnx"), str(tmp_path / "new.onnx"))  # neither exists yet
    assert not same_file(str(tmp_path / "new.onnx"), str(a))


def test_commit_writes_all_or_nothing(tmp_path, monkeypatch):
    (tmp_path / "old.json").write_text("old")
    outputs = Outputs([], force=True)
    outputs.add(str(tmp_path / "q.onnx"), "output model", "choose another")
    outputs.add(str(tmp_path / "old.json"), "report", "choose another")
    outputs.write_text(str(tmp_path / "q.onnx"), "model")
    outputs.write_text(str(tmp_path / "old.json"), "new")
    assert sorted(os.listdir(tmp_path))[1:] == ["old.json"]  # [0] is the hidden staging folder
    real_replace = os.replace
    calls = []

    def failing_replace(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(UserError, match="No space left"):
        outputs.commit()
    # q.onnx was new and is removed again; old.json was never replaced; the staging folder is gone.
    assert os.listdir(tmp_path) == ["old.json"] and (tmp_path / "old.json").read_text() == "old"


def test_discard_on_error(tmp_path):
    with pytest.raises(RuntimeError):
        with Outputs([], force=False) as outputs:
            outputs.add(str(tmp_path / "q.onnx"), "output model", "choose another")
            outputs.write_text(str(tmp_path / "q.onnx"), "model")
            raise RuntimeError("the pass failed")
    assert os.listdir(tmp_path) == []
