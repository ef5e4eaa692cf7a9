"""Candidate tactics (kernels.h): a function of the candidate's name only, so that an engine or a timing cache built
with one kernels library selects the same kernel with the next, whatever candidates were added in between.

* the rule, implemented here independently of the C code, against fixed values;
* every candidate of a built library: a positive int32, unique, equal to the rule applied to its name, and the
  lookups tactic -> id and name -> id give the id back (skipped without a build);
* a stand-in library whose two candidates' names collide: every lookup fails and stderr names both (needs nvcc).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trt_woq import kernels as K

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "plugins" / "kernels"

# Worked out once with the rule below, by hand-checked Python: the header's example names and one collision.
FIXED = {"gemv_mma_nt2": 1442744437, "conv_im2col": 2071300755}
COLLIDING = ("collide_139599", "collide_322382")  # both 305644739
COLLIDING_TACTIC = 305644739


def rule(name: str) -> int:
    """kernels.h: h = 32-bit FNV-1a of the name's bytes, tactic = h % (2^31 - 1) + 1."""
    h = 2166136261
    for byte in name.encode():
        h = ((h ^ byte) * 16777619) % 2**32
    return h % (2**31 - 1) + 1


def test_rule_matches_fixed_values():
    assert {name: rule(name) for name in FIXED} == FIXED
    assert rule(COLLIDING[0]) == rule(COLLIDING[1]) == COLLIDING_TACTIC


def test_every_candidate_tactic_is_the_rule_of_its_name(built_library):
    lib = K.Kernels(built_library)
    count = lib.candidate_count()
    assert count > 0
    tactics = {}
    for i in range(count):
        name = lib.candidate_name(i)
        tactic = lib.candidate_tactic(i)
        assert 0 < tactic < 2**31 and tactic == rule(name), (i, name, tactic)
        assert lib.candidate_by_tactic(tactic) == i and lib.candidate_by_name(name) == i, (i, name)
        tactics[tactic] = name
    assert len(tactics) == count, "two candidates share a tactic"
    present = {name: tactic for tactic, name in tactics.items() if name in FIXED}
    assert present and all(FIXED[name] == tactic for name, tactic in present.items()), present


def test_unknown_tactics_and_names_are_refused(built_library):
    lib = K.Kernels(built_library)
    assert lib.candidate_by_tactic(0) == -1 and lib.candidate_by_tactic(-5) == -1
    assert lib.candidate_by_name("no_such_candidate") == -1
    unknown = next(t for t in range(1, 1000) if all(lib.candidate_tactic(i) != t for i in range(lib.candidate_count())))
    assert lib.candidate_by_tactic(unknown) == -1
    with pytest.raises(K.KernelError, match="no such candidate"):
        lib.candidate_tactic(lib.candidate_count())


STUB_FAMILIES = """
#include "candidates.h"
namespace trt_woq {
const Candidate kGemvCandidates[] = {{"%s", {}, nullptr, nullptr, nullptr, nullptr},
                                     {"%s", {}, nullptr, nullptr, nullptr, nullptr}};
const int kGemvCandidateCount = 2;
const Candidate kGemmCandidates[] = {{"unrelated", {}, nullptr, nullptr, nullptr, nullptr}};
const int kGemmCandidateCount = 1;
const Candidate kConvCandidates[] = {{"unused", {}, nullptr, nullptr, nullptr, nullptr}};
const int kConvCandidateCount = 0;
const Candidate kW8A8Candidates[] = {{"unused", {}, nullptr, nullptr, nullptr, nullptr}};
const int kW8A8CandidateCount = 0;
}  // namespace trt_woq
""" % COLLIDING

PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.trt_woq_linear_candidate_by_name.argtypes = [ctypes.c_char_p]
print(lib.trt_woq_linear_candidate_tactic(0), lib.trt_woq_linear_candidate_tactic(2),
      lib.trt_woq_linear_candidate_by_tactic(%d), lib.trt_woq_linear_candidate_by_name(b"unrelated"))
""" % COLLIDING_TACTIC


def test_colliding_tactics_fail_every_lookup(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed: cannot build the registry with colliding stand-in candidates")
    (tmp_path / "families.cpp").write_text(STUB_FAMILIES)
    lib = tmp_path / "libcollide.so"
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-std=c++17", f"-I{KERNELS / 'include'}",
                    f"-I{KERNELS / 'src'}", str(KERNELS / "src" / "registry.cu"), str(tmp_path / "families.cpp"),
                    "-o", str(lib)], check=True, capture_output=True)
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), str(lib)], capture_output=True, text=True,
                           check=True)
    assert probe.stdout.split() == ["0", "0", "-1", "-1"]
    assert probe.stderr.count(f"share tactic {COLLIDING_TACTIC}") == 1, probe.stderr
    assert all(f'"{name}"' in probe.stderr for name in COLLIDING), probe.stderr
