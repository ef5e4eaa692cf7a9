"""CPU tests of python/trt_woq/kernels.py and of the C ABI's host-side checks (no GPU needed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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


def test_missing_cuda_python_is_explained(monkeypatch):
    for mod in ("cuda", "cuda.bindings", "cuda.bindings.runtime"):
        monkeypatch.setitem(sys.modules, mod, None)  # makes the import fail
    with pytest.raises(K.KernelLibraryError, match="cuda-python"):
        K.device_sm()


def test_act_names():
    assert K.make_params(m=1, n=4, k=64, bits=4, group_size=-1, act="bf16").act_type == K.Act.BF16
    with pytest.raises(ValueError, match="fp16"):
        K.make_params(m=1, n=4, k=64, bits=4, group_size=-1, act="fp32")


# ---- the ctypes struct mirrors the C header ----
def test_params_struct_matches_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to read the header's struct layout")
    fields = [f for f, _ in K.LinearParams._fields_]
    src = tmp_path / "layout.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "trt_woq/kernels.h"\nint main(void) {\n'
                   + '  printf("%zu\\n", sizeof(trt_woq_linear_params));\n'
                   + "".join(f'  printf("%zu\\n", offsetof(trt_woq_linear_params, {f}));\n' for f in fields)
                   + "  return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, f"-I{HEADER_DIR}", str(src), "-o", str(exe)], check=True)
    out = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    import ctypes

    assert out[0] == ctypes.sizeof(K.LinearParams)
    assert out[1:] == [getattr(K.LinearParams, f).offset for f in fields]


# ---- host-side behaviour of a built library (no GPU needed) ----
def test_candidates_are_named(built_library):
    lib = K.Kernels(built_library)
    names = lib.candidates()
    assert names and len(set(names)) == len(names)
    assert any(n.startswith("gemv") for n in names)
    with pytest.raises(K.KernelError):
        lib.candidate_name(len(names))


@pytest.mark.parametrize("kw, status", [
    (dict(k=4000), K.Status.UNSUPPORTED_SHAPE),           # K % 64
    (dict(n=4098), K.Status.UNSUPPORTED_SHAPE),           # N % 4 for INT4
    (dict(group_size=96), K.Status.UNSUPPORTED_SHAPE),
    (dict(k=4160, group_size=128), K.Status.UNSUPPORTED_SHAPE),  # group must divide K
    (dict(bits=3), K.Status.UNSUPPORTED_SHAPE),
    (dict(layout_version=2), K.Status.UNSUPPORTED_SHAPE),
    (dict(n=-4), K.Status.INVALID_ARGUMENT),
    (dict(m=17), K.Status.UNSUPPORTED_SHAPE),             # the GEMV's M limit
    (dict(), K.Status.OK),
    (dict(k=4160, n=1028, group_size=64), K.Status.OK),   # odd sizes the layout accepts
    (dict(bits=8, n=1026, group_size=-1), K.Status.OK),   # N % 2 for INT8
])
def test_gemv_supports(built_library, kw, status):
    lib = K.Kernels(built_library)
    base = dict(m=1, n=4096, k=4096, bits=4, group_size=128)
    base.update(kw)
    p = K.make_params(**base)
    gemv = [i for i, n in enumerate(lib.candidates()) if n.startswith("gemv")]
    assert {lib.supports(i, p, sm=90) for i in gemv} == {status}
    assert lib.supports(gemv[0], K.make_params(m=1, n=4096, k=4096, bits=4, group_size=128), sm=75) == \
        K.Status.UNSUPPORTED_ARCH


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
