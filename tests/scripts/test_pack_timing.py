"""scripts/pack_timing.py runs and checks its round trip (on a small matrix: the timing itself is not a test)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_pack_timing_script_small():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "pack_timing.py"), "--k", "256", "--n", "64",
                           "--repeat", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "INT4 K=256 N=64" in proc.stdout and "round trip: exact" in proc.stdout
    assert "pack:" in proc.stdout and "unpack:" in proc.stdout
