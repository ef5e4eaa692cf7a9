"""ctypes access to the GEMM's C entry points (plugins/kernels/src/gemm/gemm.h) and a problem generator shared by the
GEMM's device test and benchmark. Needs torch with CUDA; imported only on the GPU machine.

The library is ``$TRT_WOQ_GEMM_LIB`` (a .so exporting ``trt_woq_gemm_*``: the test library
libtrt_woq_kernels_testing.so, which tests/device/run_gemm.sh builds).
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# Only the packer is needed: register graph_passes as a bare namespace so that its __init__ (the ONNX passes and
# their imports) is not run on the GPU machine.
_ROOT = Path(__file__).resolve().parents[2]
if "graph_passes" not in sys.modules:
    _pkg = types.ModuleType("graph_passes")
    _pkg.__path__ = [str(_ROOT / "graph_passes")]
    sys.modules["graph_passes"] = _pkg
from graph_passes import fp6_e3m2  # noqa: E402
from graph_passes.layouts import fp6_split_v1, interleaved_v1  # noqa: E402

# The params struct (gemm.h uses kernels.h's trt_woq_linear_params) and the status codes come from the package's
# wrapper, python/trt_woq/kernels.py (no torch there).
if str(_ROOT / "python") not in sys.path:
    sys.path.insert(0, str(_ROOT / "python"))

from trt_woq.kernels import LinearParams as Params  # noqa: E402
from trt_woq.kernels import Status, weight_format_from_bits  # noqa: E402

OK, INVALID_ARGUMENT, UNSUPPORTED_SHAPE, UNSUPPORTED_ARCH, WORKSPACE, CUDA = (
    int(Status[name]) for name in ("OK", "INVALID_ARGUMENT", "UNSUPPORTED_SHAPE", "UNSUPPORTED_ARCH", "WORKSPACE", "CUDA"))
ACT = {torch.float16: 0, torch.bfloat16: 1}


class Gemm:
    """The GEMM's own entry points (trt_woq_gemm_*); statuses are returned, not raised (the test checks refusals)."""

    PATH_ENV = "TRT_WOQ_GEMM_LIB"
    PREFIX = "trt_woq_gemm_"
    CUDA_ERROR = "trt_woq_gemm_last_cuda_error"

    def __init__(self, path: str | None = None):
        lib = ctypes.CDLL(path or os.environ[self.PATH_ENV])
        p = ctypes.POINTER(Params)
        f = {short: getattr(lib, self.PREFIX + short) for short in
             ("candidate_count", "candidate_describe", "candidate_supports", "workspace_size", "dispatch", "run")}
        f["last_cuda_error"] = getattr(lib, self.CUDA_ERROR)
        f["candidate_count"].restype = ctypes.c_int32
        f["candidate_describe"].argtypes = [ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]
        f["candidate_supports"].argtypes = [ctypes.c_int32, p, ctypes.c_int32]
        f["workspace_size"].argtypes = [ctypes.c_int32, p, ctypes.c_int32]
        f["workspace_size"].restype = ctypes.c_size_t
        f["dispatch"].argtypes = [p, ctypes.c_int32]
        f["dispatch"].restype = ctypes.c_int32
        f["run"].argtypes = [ctypes.c_int32, p, ctypes.c_void_p]
        f["last_cuda_error"].restype = ctypes.c_char_p
        self.lib, self.f = lib, f
        major, minor = torch.cuda.get_device_capability()
        self.sm = 10 * major + minor

    def count(self) -> int:
        return self.f["candidate_count"]()

    def name(self, i: int) -> str:
        buf = ctypes.create_string_buffer(128)
        assert self.f["candidate_describe"](i, buf, 128) == OK
        return buf.value.decode()

    def supports(self, i: int, prm: Params) -> int:
        return self.f["candidate_supports"](i, ctypes.byref(prm), self.sm)

    def workspace(self, i: int, prm: Params) -> int:
        return self.f["workspace_size"](i, ctypes.byref(prm), self.sm)

    def dispatch(self, prm: Params) -> int:
        return self.f["dispatch"](ctypes.byref(prm), self.sm)

    def run(self, i: int, prm: Params, stream: int | None = None) -> int:
        s = torch.cuda.current_stream().cuda_stream if stream is None else stream
        return self.f["run"](i, ctypes.byref(prm), ctypes.c_void_p(s))

    def cuda_error(self) -> str:
        return self.f["last_cuda_error"]().decode()


class Linear(Gemm):
    """The library's public C ABI (trt_woq_linear_*), same methods as Gemm: the registry with GEMV and GEMM."""

    PATH_ENV = "TRT_WOQ_KERNELS_LIB"
    PREFIX = "trt_woq_linear_"
    CUDA_ERROR = "trt_woq_last_cuda_error"


@dataclass
class Problem:
    m: int
    n: int
    k: int
    bits: int
    group: int
    dtype: torch.dtype
    zeros: bool
    bias: bool
    x: torch.Tensor = None
    packed: torch.Tensor = None
    scales: torch.Tensor = None
    zp: torch.Tensor = None
    b: torch.Tensor = None
    u: torch.Tensor = None  # uint8 [K, N] on the GPU (FP6: the E3M2 codes), kept for the reference

    def label(self) -> str:
        g = "pc" if self.group == -1 else f"g{self.group}"
        dt = "fp16" if self.dtype == torch.float16 else "bf16"
        fmt = "fp6" if self.bits == 6 else f"int{self.bits}"
        return (f"M={self.m} N={self.n} K={self.k} {fmt} {g} {dt}"
                f"{' zeros' if self.zeros else ''}{' bias' if self.bias else ''}")

    def params(self, out: torch.Tensor | None, ws: torch.Tensor | None = None) -> Params:
        prm = Params()
        ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
        prm.activation, prm.packed_weight, prm.scales = ptr(self.x), ptr(self.packed), ptr(self.scales)
        prm.zeros, prm.bias, prm.output = ptr(self.zp), ptr(self.b), ptr(out)
        prm.m, prm.n, prm.k, prm.group_size = self.m, self.n, self.k, self.group
        prm.weight_format = weight_format_from_bits(self.bits)
        prm.layout_version, prm.act_type = layout(self.bits).VERSION, ACT[self.dtype]
        prm.workspace = ptr(ws)
        prm.workspace_size = 0 if ws is None else ws.numel() * ws.element_size()
        return prm


def select(g: Gemm, spec: str) -> list[int]:
    """Candidate ids of `g` named by a comma-separated list of names or shell patterns
    ('gemm_wgmma_ws_*x128x64_s6*,gemm_wgmma_ws_256x128x64_s5'), sorted. Names survive the ids that additions
    shift. A pattern that matches nothing is an error (a typo would silently shrink a sweep)."""
    names = [g.name(i) for i in range(g.count())]
    ids: set[int] = set()
    for pat in spec.split(","):
        hit = [i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            raise SystemExit(f"no GEMM candidate matches {pat!r}; candidates: {', '.join(names)}")
        ids |= set(hit)
    return sorted(ids)


def layout(bits: int):
    """The packed layout module of a bit width: fp6_split_v1 for 6 (FP6 E3M2 codes), interleaved_v1 for 8 and 4."""
    return fp6_split_v1 if bits == 6 else interleaved_v1


def make_problem(m, n, k, bits, group, dtype, zeros, bias, rng: np.random.Generator, random_words=False) -> Problem:
    """Fresh random operands on the GPU. random_words=True skips the packer (timing only: any word is valid data).
    bits = 6: FP6 E3M2 codes (all 64) packed by fp6_split_v1, no zero points."""
    pr = Problem(m, n, k, bits, group, dtype, zeros, bias)
    dev = "cuda"
    ng = 1 if group == -1 else k // group
    if random_words:
        shape = layout(bits).packed_shape(k, n, bits)
        pr.packed = torch.randint(-2**31, 2**31 - 1, shape, dtype=torch.int32, device=dev)
    else:
        u = rng.integers(0, 1 << bits, size=(k, n), dtype=np.uint8)
        pr.packed = torch.from_numpy(layout(bits).pack(u, bits)).to(dev)
        pr.u = torch.from_numpy(u).to(dev)
    pr.x = torch.randn(m, k, device=dev).to(dtype)
    pr.scales = (torch.rand(ng, n, device=dev) * 0.02 + 0.005).to(dtype)  # never zero
    if zeros:
        pr.zp = torch.randint(0, 1 << bits, (ng, n), device=dev).to(dtype)
    if bias:
        pr.b = torch.randn(n, device=dev).to(dtype)
    return pr


def with_m(pr: Problem, m: int) -> Problem:
    """The same weights with the first m rows of the activation."""
    return Problem(m, pr.n, pr.k, pr.bits, pr.group, pr.dtype, pr.zeros, pr.bias, pr.x[:m].contiguous(), pr.packed,
                   pr.scales, pr.zp, pr.b, pr.u)


def dequant64(pr: Problem) -> torch.Tensor:
    """Float64 W = (U - Z) * S on the GPU; FP6: W = decode(C) * S (fp6_e3m2's decoder as a 64-entry table)."""
    g = pr.k if pr.group == -1 else pr.group
    s = pr.scales.double().repeat_interleave(g, dim=0)
    if pr.bits == 6:
        return torch.from_numpy(fp6_e3m2.decode(np.arange(64))).to(s.device)[pr.u.long()] * s
    z = (pr.zp.double().repeat_interleave(g, dim=0) if pr.zeros
         else torch.full_like(s, float(1 << (pr.bits - 1))))
    return (pr.u.double() - z) * s


def reference(pr: Problem, rows: torch.Tensor | None = None, w: torch.Tensor | None = None) -> torch.Tensor:
    """Float64 Y (or the given rows of it) on the GPU: X @ ((U - Z) * S) + bias."""
    w = dequant64(pr) if w is None else w
    x = pr.x.double() if rows is None else pr.x[rows].double()
    y = x @ w
    if pr.bias:
        y += pr.b.double()
    return y
