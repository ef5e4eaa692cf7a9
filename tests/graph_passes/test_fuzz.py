"""Fuzz test of the CLI: generated malformed and odd models, external data and paths through ``quantize``,
``inspect`` and ``compare``. Every case must end with exit status 0 or 2 (``compare`` also 1, its FAILED verdict),
no traceback, one line on stderr when it fails, the input files' bytes unchanged, and nothing new left behind on
exit 2 (not even a hidden temporary folder). Cases are generated from fixed seeds (printed per case), so a failure
reproduces with ``pytest tests/graph_passes/test_fuzz.py -k CASE_ID``."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from cli_cases import CASES, MUST_REFUSE, tree
from graph_passes.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def _check_run(argv, rc, err, inputs, before, after, case_id):
    """The invariants of one run; ``inputs`` (the case's own files), ``before`` and ``after`` (the run) list every
    file of the case's folder with its hash."""
    allowed = (0, 1, 2) if argv[0] == "compare" else (0, 2)
    assert rc in allowed, (case_id, argv, rc, err)
    assert "Traceback" not in err, (case_id, argv, err)
    changed = {p for p in inputs if after.get(p) != inputs[p]}
    assert not changed, (case_id, argv, "input files changed", changed)
    assert not [p for p in after if ".trt-woq-" in p], (case_id, argv, "temporary left", after)
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0], (case_id, argv, err)
        assert after == before, (case_id, argv, "exit 2 left files behind", set(after) - set(before))
    if case_id in MUST_REFUSE:
        assert rc == 2, (case_id, argv, "should be refused")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_fuzz_in_process(case_id, tmp_path, capsys):
    seed = _seed(case_id)
    print(f"case {case_id}: seed {seed}")
    rng = np.random.default_rng(seed)
    argvs = CASES[case_id](rng, tmp_path)
    inputs = tree(tmp_path)
    for argv in argvs:  # the outputs of a successful run stay for the next command, as in a user's folder
        before = tree(tmp_path)
        capsys.readouterr()
        rc = main(argv)
        _check_run(argv, rc, capsys.readouterr().err, inputs, before, tree(tmp_path), case_id)


SUBPROCESS_CASES = ["truncated_5", "external_short", "paths_report_is_input"]


@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_fuzz_subprocess(case_id, tmp_path):
    seed = _seed(case_id)
    print(f"case {case_id}: seed {seed}")
    argvs = CASES[case_id](np.random.default_rng(seed), tmp_path)
    env = {**os.environ, "PYTHONPATH": ROOT}
    argv = argvs[0]
    before = tree(tmp_path)
    res = subprocess.run([sys.executable, "-m", "graph_passes", *argv], capture_output=True, text=True, cwd=ROOT,
                         env=env)
    _check_run(argv, res.returncode, res.stderr, before, before, tree(tmp_path), case_id)


def test_battery_size():
    assert len(CASES) >= 150, len(CASES)
