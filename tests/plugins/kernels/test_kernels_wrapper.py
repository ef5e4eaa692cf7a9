"""CPU tests of python/trt_woq/kernels.py and of the C ABI's host-side checks (no GPU needed)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from trt_woq import _libs
from trt_woq import kernels as K

HEADER_DIR = Path(__file__).resolve().parents[3] / "plugins" / "kernels" / "include"


# ---- finding and loading the library ----
def test_env_var_to_missing_file_names_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(K.PATH_ENV, str(tmp_path / "nope.so"))
    with pytest.raises(_libs.LibraryNotFoundError, match=K.PATH_ENV):
        K.Kernels()


def test_not_installed_says_how_to_provide_it(monkeypatch, tmp_path):
    monkeypatch.delenv(K.PATH_ENV, raising=False)
    monkeypatch.setattr(_libs, "_PACKAGE_LIB_DIR", tmp_path)
    with pytest.raises(_libs.LibraryNotFoundError) as e:
        K.Kernels()
    assert K.LIBRARY_NAME in str(e.value) and K.PATH_ENV in str(e.value) and "pip install" in str(e.value)


def test_unloadable_file_is_a_library_error(tmp_path):
    bad = tmp_path / K.LIBRARY_NAME
    bad.write_text("not an ELF file")
    with pytest.raises(K.KernelLibraryError, match="cannot load"):
        K.Kernels(bad)


@pytest.mark.parametrize("source, version", [
    ("int trt_woq_abi_version(void) { return 1; }", 1),
    ("int trt_woq_other(void) { return 0; }", 1),  # built before trt_woq_abi_version existed
    (f"int trt_woq_abi_version(void) {{ return {K.ABI_VERSION - 1}; }}", K.ABI_VERSION - 1),
    (f"int trt_woq_abi_version(void) {{ return {K.ABI_VERSION + 1}; }}", K.ABI_VERSION + 1),
])
def test_library_of_another_abi_is_refused(tmp_path, source, version):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in library")
    (tmp_path / "stub.c").write_text(source + "\n")
    lib = tmp_path / K.LIBRARY_NAME
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "stub.c"), "-o", str(lib)], check=True)
    with pytest.raises(K.KernelLibraryError, match=f"C ABI version {version}; this package needs version "
                                                   f"{K.ABI_VERSION}"):
        K.Kernels(lib)


def test_missing_cuda_python_is_explained(monkeypatch):
    for mod in ("cuda", "cuda.bindings", "cuda.bindings.runtime"):
        monkeypatch.setitem(sys.modules, mod, None)  # makes the import fail
    with pytest.raises(K.KernelLibraryError, match="cuda-python"):
        K.device_sm()


def test_act_names():
    assert K.make_params(m=1, n=4, k=64, bits=4, group_size=-1, act="bf16").act_type == K.Act.BF16
    with pytest.raises(ValueError, match="fp16"):
        K.make_params(m=1, n=4, k=64, bits=4, group_size=-1, act="fp32")


# ---- the ctypes mirrors match the C header ----
HEADER = HEADER_DIR / "trt_woq" / "kernels.h"
MIRRORED_ENUMS = {  # C typedef -> (Python enum, prefixes of its enumerators, longest first)
    "trt_woq_status": (K.Status, ("TRT_WOQ_ERR_", "TRT_WOQ_")),
    "trt_woq_act_type": (K.Act, ("TRT_WOQ_ACT_",)),
    "trt_woq_weight_format": (K.WeightFormat, ("TRT_WOQ_WEIGHT_",)),
    "trt_woq_act_mode": (K.ActMode, ("TRT_WOQ_ACT_MODE_",)),
    "trt_woq_op": (K.Op, ("TRT_WOQ_OP_",)),
    "trt_woq_epilogue": (K.Epilogue, ("TRT_WOQ_EPILOGUE_",)),
    "trt_woq_conv_k_order": (K.ConvKOrder, ("TRT_WOQ_CONV_K_",)),
}


def header_enums() -> dict[str, dict[str, int]]:
    """typedef name -> {enumerator: value} of every `typedef enum` in kernels.h."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    return {name: {m[0]: int(m[1]) for m in re.findall(r"(\w+)\s*=\s*(-?\d+)", body)}
            for body, name in re.findall(r"typedef enum \w+ \{(.*?)\} (\w+);", text, flags=re.S)}


def test_enums_match_header():
    enums = header_enums()
    assert set(enums) == set(MIRRORED_ENUMS), "an enum of kernels.h has no mirror in trt_woq.kernels (or vice versa)"
    for typedef, (py_enum, prefixes) in MIRRORED_ENUMS.items():
        c_values = {}
        for c_name, value in enums[typedef].items():
            prefix = next(p for p in prefixes if c_name.startswith(p))
            c_values[c_name[len(prefix):]] = value
        assert c_values == {m.name: int(m) for m in py_enum}, typedef


def test_abi_version_matches_header():
    assert re.search(r"#define TRT_WOQ_ABI_VERSION (\d+)", HEADER.read_text())[1] == str(K.ABI_VERSION)


@pytest.mark.parametrize("c_struct, mirror", [
    ("trt_woq_linear_params", K.LinearParams),
    ("trt_woq_conv_geometry", K.ConvGeometry),
    ("trt_woq_candidate_info", K.CandidateInfo),
])
def test_struct_matches_header(tmp_path, c_struct, mirror):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header's struct layout")
    fields = [f for f, _ in mirror._fields_]
    src = tmp_path / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "trt_woq/kernels.h"\nint main(void) {\n'
                   + f'  printf("%zu\\n", sizeof({c_struct}));\n'
                   + "".join(f'  printf("%zu %zu\\n", offsetof({c_struct}, {f}), sizeof((({c_struct}*)0)->{f}));\n'
                             for f in fields)
                   + "  return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-Wall", "-Werror", f"-I{HEADER_DIR}", str(src), "-o", str(exe)], check=True)
    out = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    assert out[0] == ctypes.sizeof(mirror)
    assert out[1:] == [v for f in fields for v in (getattr(mirror, f).offset, getattr(mirror, f).size)]


def test_make_params_names_the_format_once():
    assert K.make_params(m=1, n=4, k=64, bits=6, group_size=-1).weight_format == K.WeightFormat.FP6_E3M2
    p = K.make_params(m=1, n=4, k=64, weight_format="fp6_e3m2", group_size=-1)
    assert (p.weight_format, p.layout_version) == (K.WeightFormat.FP6_E3M2, 2)
    assert K.make_params(m=1, n=4, k=64, weight_format=K.WeightFormat.INT8, group_size=-1).layout_version == 1
    with pytest.raises(ValueError, match="one of"):
        K.make_params(m=1, n=4, k=64, bits=4, weight_format="int4", group_size=-1)
    with pytest.raises(ValueError, match="bits must be"):
        K.make_params(m=1, n=4, k=64, bits=3, group_size=-1)
    with pytest.raises(ValueError, match="weight_format must be"):
        K.make_params(m=1, n=4, k=64, weight_format="int2", group_size=-1)


def test_describe_names_the_options():
    p = K.make_params(m=2, n=8, k=64, weight_format="int8", group_size=-1, act_mode=K.ActMode.W8A8_DYNAMIC,
                      act_asymmetric=True, epilogue=K.Epilogue.GELU_TANH)
    assert p.describe() == ("m=2, n=8, k=64, int8 per-channel, fp16, w8a8_dynamic asymmetric, epilogue gelu_tanh, "
                            "layout v1")


# ---- host-side behaviour of a built library (no GPU needed) ----
def test_candidates_are_named(built_library):
    lib = K.Kernels(built_library)
    names = lib.candidates()
    assert names and len(set(names)) == len(names)
    assert any(n.startswith("gemv") for n in names)
    with pytest.raises(K.KernelError):
        lib.candidate_name(len(names))


class Raw(NamedTuple):
    """A struct field value set after make_params (which would refuse it)."""

    value: int


@pytest.mark.parametrize("kw, status", [
    (dict(k=4000), K.Status.UNSUPPORTED_SHAPE),           # K % 64
    (dict(n=4098), K.Status.UNSUPPORTED_SHAPE),           # N % 4 for INT4
    (dict(group_size=96), K.Status.UNSUPPORTED_SHAPE),
    (dict(k=4160, group_size=128), K.Status.UNSUPPORTED_SHAPE),  # group must divide K
    (dict(weight_format=Raw(3)), K.Status.INVALID_ARGUMENT),  # outside the enum
    (dict(layout_version=2), K.Status.UNSUPPORTED_SHAPE),  # not INT4's layout
    (dict(weight_format="fp6_e3m2", layout_version=1), K.Status.UNSUPPORTED_SHAPE),
    (dict(n=-4), K.Status.INVALID_ARGUMENT),
    (dict(act_mode=2), K.Status.INVALID_ARGUMENT),
    (dict(act_asymmetric=True), K.Status.INVALID_ARGUMENT),  # no activation offset without W8A8
    (dict(op=2), K.Status.INVALID_ARGUMENT),
    (dict(op=K.Op.CONV2D), K.Status.INVALID_ARGUMENT),       # conv geometry left empty
    (dict(epilogue=6), K.Status.INVALID_ARGUMENT),
    (dict(epilogue=K.Epilogue.CLIP, clip_min=1.0, clip_max=-1.0), K.Status.INVALID_ARGUMENT),
    (dict(epilogue=K.Epilogue.CLIP, clip_min=float("nan"), clip_max=1.0), K.Status.INVALID_ARGUMENT),
    (dict(m=65), K.Status.UNSUPPORTED_SHAPE),             # the GEMV's M limit (M = 17..64: gemv_ws_nt4 only, below)
    (dict(), K.Status.OK),
    (dict(k=4160, n=1028, group_size=64), K.Status.OK),   # odd sizes the layout accepts
    (dict(weight_format="int8", n=1026, group_size=-1), K.Status.OK),  # N % 2 for INT8
])
def test_gemv_supports(built_library, kw, status):
    lib = K.Kernels(built_library)
    base = dict(m=1, n=4096, k=4096, weight_format="int4", group_size=128)
    base.update({f: v for f, v in kw.items() if not isinstance(v, Raw)})
    p = K.make_params(**base)
    for f, v in kw.items():
        if isinstance(v, Raw):
            setattr(p, f, v.value)
    gemv = [i for i, n in enumerate(lib.candidates()) if n.startswith("gemv")]
    assert {lib.supports(i, p, sm=90) for i in gemv} == {status}
    assert lib.supports(gemv[0], K.make_params(m=1, n=4096, k=4096, bits=4, group_size=128), sm=75) == \
        K.Status.UNSUPPORTED_ARCH


def test_only_the_ws_gemv_takes_m_17_to_64(built_library):
    lib = K.Kernels(built_library)
    gemv = {n: i for i, n in enumerate(lib.candidates()) if n.startswith("gemv")}
    for m in (17, 33, 64):
        p = K.make_params(m=m, n=4096, k=4096, weight_format="int4", group_size=128)
        took = {n for n, i in gemv.items() if lib.supports(i, p, sm=90) == K.Status.OK}
        assert took == {"gemv_ws_nt4"}, (m, took)
        assert lib.supports(gemv["gemv_ws_nt4"], p, sm=80) == K.Status.UNSUPPORTED_ARCH


@pytest.mark.parametrize("m", [1, 2, 3, 7, 8, 15, 16])
@pytest.mark.parametrize("bits, sm", [(4, 90), (8, 90), (4, 80)])
def test_dispatch_up_to_16(built_library, m, bits, sm):
    """GEMV for M <= 8; for INT4 with M > 8 on SM90 at this shape the GEMM family's pick when the library has one
    (measured faster)."""
    lib = K.Kernels(built_library)
    p = K.make_params(m=m, n=4096, k=4096, bits=bits, group_size=128)
    cid = lib.dispatch(p, sm=sm)
    assert cid >= 0 and lib.supports(cid, p, sm=sm) == K.Status.OK
    has_gemm = any(not n.startswith("gemv") for n in lib.candidates())
    if m <= 8 or bits == 8 or sm < 90 or not has_gemm:
        assert lib.candidate_name(cid).startswith("gemv")
        assert lib.workspace_size(p, sm=sm) == 0
    else:
        assert not lib.candidate_name(cid).startswith("gemv")


def test_run_with_null_pointer_names_m_n_k(built_library):
    lib = K.Kernels(built_library)
    with pytest.raises(K.KernelError) as e:
        lib.linear(x=None, packed_weight=16, scales=16, output=16, m=3, n=1028, k=4160, bits=4, group_size=64)
    assert e.value.status == K.Status.INVALID_ARGUMENT
    msg = str(e.value)
    assert "m=3" in msg and "n=1028" in msg and "k=4160" in msg and "INVALID_ARGUMENT" in msg


def test_status_strings(built_library):
    lib = K.Kernels(built_library)
    texts = {lib.status_string(s) for s in K.Status}
    assert len(texts) == len(K.Status) and all(texts)
