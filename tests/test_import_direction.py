"""One direction of imports: trt_woq may import graph_passes; graph_passes never imports trt_woq (issue 12)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _trt_woq_imports(path: Path) -> list[str]:
    """'file:line' of every import of trt_woq in ``path``, top level or inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names = [str(node.args[0].value)]
        if any(n == "trt_woq" or n.startswith("trt_woq.") for n in names):
            found.append(f"{path}:{node.lineno}")
    return found


def test_graph_passes_sources_never_import_trt_woq():
    files = sorted((ROOT / "graph_passes").rglob("*.py"))
    assert len(files) > 10
    offenders = [hit for f in files for hit in _trt_woq_imports(f)]
    assert not offenders, f"graph_passes imports trt_woq at {offenders}"


def test_the_check_sees_imports_inside_functions(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import trt_woqx\ndef f():\n    from trt_woq.errors import TrtWoqError\n    import trt_woq\n"
                     "    __import__('trt_woq.compare')\n")
    assert [int(hit.rsplit(":", 1)[1]) for hit in _trt_woq_imports(probe)] == [3, 4, 5]


def test_importing_graph_passes_loads_no_trt_woq():
    code = ("import sys, graph_passes, graph_passes.__main__, graph_passes.compare, graph_passes.feeds, "
            "graph_passes.pipeline, graph_passes.passes\n"
            "graph_passes.__main__.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trt_woq', 'tensorrt', 'polygraphy')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "python")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
