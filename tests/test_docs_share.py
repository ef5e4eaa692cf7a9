"""docs/ stays a reference: under 10 % of the repository's tracked lines (benchmark JSON included)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the share is measured over tracked files")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def line_count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def test_docs_hold_under_ten_percent_of_the_lines():
    files = tracked_files()
    total = sum(line_count(p) for p in files)
    docs = sum(line_count(p) for p in files if p.relative_to(ROOT).parts[0] == "docs")
    assert docs < 0.10 * total, f"docs/ holds {docs} of {total} lines ({100 * docs / total:.1f} %), limit 10 %"
