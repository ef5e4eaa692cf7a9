"""Benchmark of the WeightOnlyLinear kernels against cuBLAS, Marlin and torch's int4 GEMM: ``python -m trt_woq.bench``.

For each (K, N) and M: median time per call of ours (INT8 per-channel, INT4 g128 symmetric and asymmetric, FP16
activations, through the C ABI's dispatch), cuBLAS FP16 and BF16 (``torch.matmul``), ``torch._weight_int4pack_mm``
(BF16, group 128) and, where their Python extensions are importable, Marlin (``marlin.mul``, FP16 x INT4 g128; built
from IST-DASLab/marlin) and FP6-LLM (``fp6_llm.linear_forward_cuda``, FP16 x FP6 E3M2 per channel, best split-K;
built from usyd-fsalab/fp6_llm for sm_90; see docs/performance.md), all in the same process. Bandwidth: our weight
bytes (packed weights + scales + zeros) per second, as a fraction of cuBLAS FP16's achieved weight bandwidth (its
FP16 weight bytes over its time) at the same (K, N, M), and of a read-only stream of the same bytes (a Triton kernel
that reads each word once, as ours must) timed once per (K, N) in the same run. The device's copy
bandwidth (read + written) is printed for information. The closing summary gives, per (K, N) and M range (1-16,
17-128, 129-1023, >= 1024), the minimum and geometric mean of cuBLAS FP16 time / ours and Marlin time / ours.

Timing: every method's calls are captured in one CUDA graph that cycles through enough copies of the weights to exceed
2.5x the L2 cache (so each call streams its weights from HBM), at least 24 calls per replay; the figure is the median
over ``--replays`` replays (default 25) of (replay time / calls). The methods of one (K, N, M) group take their
replays in turn (cuBLAS, ours, cuBLAS, ours, ...), not one method's replays after another's: under the power cap
below, the method timed last would otherwise run on a hotter, slower GPU. Weight values are random (speed does not
depend on them; correctness is tests/device/kernels_check.py's and gemm_check.py's job). FP6-LLM launches on the legacy
default stream, which a graph captured on a side stream cannot hold: it is timed by back-to-back launches from Python
between two events (time_eager), at every split-K of FP6_LLM_SPLIT_K, and its row keeps the fastest (``split_k``).

Clocks: seconds of compute-bound GEMMs at M >= 256 push an H100 to its power cap (700 W, SM clock down to ~1.3 GHz),
which slows the latency-bound kernels timed right after them (ours at M <= 64) but not the DRAM-bound cuBLAS calls.
So the run pauses ``--settle`` seconds before a group of M <= 64 that follows a group of M >= 256, and records the SM
clock after every (K, N, M) group (``sm_mhz`` in the JSON, ``SM MHz`` in the table; needs nvidia-ml-py).

Needs torch with CUDA (benchmark only; the library itself never imports torch).

    python -m trt_woq.bench                       # eight LLM shapes, M = 1..16, 24, ..., 4096; table + bench.json
    python -m trt_woq.bench --m 1,16,333 --shapes 4096x4096,14336x4096 --json out.json
    python -m trt_woq.bench --candidates          # also every GEMV candidate for INT4 g128 / INT8 (dispatch tuning)
    python -m trt_woq.bench --one int4_g128,1,14336,4096[,gemv_mma_nt2]   # a few launches of one case (for ncu)
    python -m trt_woq.bench --markdown bench.json # the saved run as markdown tables (no GPU)

Extending: a new method is one entry of METHODS (a name and a factory returning per-copy callables); M > 16 rows work
as soon as a GEMM family is registered in the library (ours go through the dispatch); TFLOP/s is in every JSON row.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from trt_woq import kernels as K

SHAPES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (8192, 10240), (8192, 8192), (8192, 57344),
          (28672, 8192)]  # (K, N)
# Every M of the small-batch regime, then the batched / chunked-prefill range up to large prefill.
M_VALUES = tuple(range(1, 17)) + (24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
                                  2048, 4096)
M_RANGES = ((1, 16), (17, 128), (129, 1023), (1024, None))  # the summary's M ranges (inclusive; None: no bound)
OURS = ("int8_pc", "int4_g128", "int4_g128_asym")
BASELINES = ("cublas_fp16", "cublas_bf16", "torch_int4", "marlin")
FP6_LLM_SPLIT_K = (1, 2, 3, 4, 6, 8)


def _torch():
    import torch

    return torch


@dataclass
class Setup:
    """One method on one (K, N): per-copy call factories, and the bytes of one weight copy."""

    weight_bytes: int
    make_calls: Callable[[int], list[Callable[[], None]]]  # m -> one callable per weight copy
    note: str = ""
    # A method that cannot be captured in a graph times itself: m -> (microseconds, extra fields of its row).
    timer: Callable[[int], tuple[float, dict]] | None = None


@dataclass
class Row:
    k: int
    n: int
    m: int
    method: str
    us: float | None
    weight_bytes: int
    error: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def gbps(self) -> float | None:
        return self.weight_bytes / self.us / 1e3 if self.us else None

    @property
    def tflops(self) -> float | None:
        return 2.0 * self.m * self.n * self.k / self.us / 1e6 if self.us else None


def copies_for(weight_bytes: int, l2_bytes: int) -> int:
    return max(2, math.ceil(2.5 * l2_bytes / max(weight_bytes, 1)))


# ---- methods -----------------------------------------------------------------------------------------------------
def setup_ours(lib: K.Kernels, k: int, n: int, bits: int, group: int, zeros: bool, act: str, l2: int,
               candidate: int = K.CANDIDATE_AUTO, act_mode: int = K.ActMode.WEIGHT_ONLY) -> Setup:
    torch = _torch()
    dtype = torch.float16 if act == "fp16" else torch.bfloat16
    g = k if group == -1 else group
    pk_words = (n // 4) * (3 * k // 4) if bits == 6 else (n // (4 if bits == 4 else 2)) * (k // 2)  # FP6: layout 2
    scale_elems = (k // g) * n
    wbytes = pk_words * 4 + scale_elems * 2 * (2 if zeros else 1)
    copies = copies_for(wbytes, l2)
    packed = [torch.randint(-2**31, 2**31 - 1, (pk_words,), dtype=torch.int32, device="cuda") for _ in range(copies)]
    scales = [(torch.rand(scale_elems, device="cuda") * 0.01 + 0.001).to(dtype) for _ in range(copies)]
    zs = [torch.randint(0, 1 << bits, (scale_elems,), device="cuda").to(dtype) for _ in range(copies)] if zeros \
        else [None] * copies

    def make_calls(m: int):
        x = torch.randn(m, k, device="cuda").to(dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        params = [K.make_params(m=m, n=n, k=k, bits=bits, group_size=group, act=act, x=x.data_ptr(),
                                packed_weight=packed[i].data_ptr(), scales=scales[i].data_ptr(),
                                zeros=zs[i].data_ptr() if zs[i] is not None else None, output=y.data_ptr(),
                                act_mode=act_mode)
                  for i in range(copies)]
        ws_bytes = lib.workspace_size(params[0], candidate)
        ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
        for prm in params:
            prm.workspace, prm.workspace_size = (ws.data_ptr(), ws_bytes) if ws_bytes else (None, 0)
        keep = (x, y, ws)

        def call(p):
            def run():
                keep  # noqa: B018 (buffers live as long as the calls)
                lib.run(p, stream=torch.cuda.current_stream().cuda_stream, candidate=candidate)
            return run

        return [call(p) for p in params]

    return Setup(wbytes, make_calls)


def setup_cublas(k: int, n: int, dtype_name: str, l2: int) -> Setup:
    torch = _torch()
    dtype = torch.float16 if dtype_name == "fp16" else torch.bfloat16
    wbytes = k * n * 2
    copies = copies_for(wbytes, l2)
    ws = [torch.randn(k, n, device="cuda").to(dtype) * 0.01 for _ in range(copies)]

    def make_calls(m: int):
        x = torch.randn(m, k, device="cuda").to(dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        return [(lambda w=w: torch.matmul(x, w, out=y)) for w in ws]

    return Setup(wbytes, make_calls)


def setup_torch_int4(k: int, n: int, l2: int) -> Setup:
    """torch._weight_int4pack_mm (tinygemm), BF16, group 128: weight [N, K/2] uint8 -> _convert_weight_to_int4pack."""
    torch = _torch()
    group = 128
    inner_k_tiles = 8
    w8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
    packed0 = torch._convert_weight_to_int4pack(w8, inner_k_tiles)
    wbytes = packed0.numel() * packed0.element_size() + (k // group) * n * 2 * 2
    copies = copies_for(wbytes, l2)
    packed = [packed0] + [torch._convert_weight_to_int4pack(torch.randint_like(w8, 0, 256), inner_k_tiles)
                          for _ in range(copies - 1)]
    sz = [(torch.rand(k // group, n, 2, device="cuda") * 0.01).to(torch.bfloat16) for _ in range(copies)]

    def make_calls(m: int):
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        return [(lambda p=p, s=s: torch._weight_int4pack_mm(x, p, group, s)) for p, s in zip(packed, sz)]

    return Setup(wbytes, make_calls, note=f"innerKTiles={inner_k_tiles}")


def setup_torch_int_mm(k: int, n: int, l2: int, quantize: bool) -> Setup:
    """``torch._int_mm`` (cuBLASLt INT8 -> INT32) on an INT8 weight [K, N] (column-major, cuBLASLt's fast TN form);
    ``quantize``: the activations are FP16 and quantized per token in torch first (absmax / 127, round, clamp), the
    INT32 result dequantized by the token and channel scales to FP16: the W8A8 path a torch user writes. Without it,
    X is INT8 already and the INT32 result is the output (no quantization work at all). Needs M > 16."""
    torch = _torch()
    wbytes = k * n + (n * 2 if quantize else 0)
    copies = copies_for(wbytes, l2)
    ws = [torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda").t() for _ in range(copies)]
    sw = [(torch.rand(1, n, device="cuda") * 0.01).to(torch.float16) for _ in range(copies)]

    def make_calls(m: int):
        if not quantize:
            x8 = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda")
            return [(lambda w=w: torch._int_mm(x8, w)) for w in ws]
        x = torch.randn(m, k, device="cuda").to(torch.float16)

        def call(w, s):
            def run():
                sa = x.abs().amax(dim=1, keepdim=True).float() / 127.0
                x8 = torch.clamp(torch.round(x.float() / sa), -127, 127).to(torch.int8)
                return (torch._int_mm(x8, w).float() * sa * s.float()).to(torch.float16)
            return run

        return [call(w, s) for w, s in zip(ws, sw)]

    return Setup(wbytes, make_calls)


def marlin_available() -> bool:
    try:
        import marlin  # noqa: F401
    except ImportError:
        return False
    return True


def setup_marlin(k: int, n: int, l2: int) -> Setup:
    """Marlin (IST-DASLab/marlin, ``marlin.mul``): FP16 activations x INT4 g128 weights in its own tiled layout
    ([K / 16, 2 N] int32; any words are valid INT4 data) with FP16 scales [K / 128, N]."""
    import marlin

    torch = _torch()
    group = 128
    wbytes = k * n // 2 + (k // group) * n * 2
    copies = copies_for(wbytes, l2)
    packed = [torch.randint(-2**31, 2**31 - 1, (k // 16, n * 2), dtype=torch.int32, device="cuda")
              for _ in range(copies)]
    scales = [(torch.rand(k // group, n, device="cuda") * 0.01 + 0.001).half() for _ in range(copies)]
    workspace = torch.zeros(n // 128 * 16, dtype=torch.int32, device="cuda")  # Marlin leaves it zeroed after a call

    def make_calls(m: int):
        x = torch.randn(m, k, device="cuda").half()
        y = torch.empty(m, n, device="cuda", dtype=torch.float16)
        return [(lambda b=b, sc=sc: marlin.mul(x, b, y, sc, workspace)) for b, sc in zip(packed, scales)]

    return Setup(wbytes, make_calls)


def fp6_llm_available() -> bool:
    try:
        _torch()  # its extension links against torch's libraries: torch loads them first
        import fp6_llm  # noqa: F401
    except ImportError:
        return False
    return True


def setup_fp6_llm(k: int, n: int, l2: int, replays: int) -> Setup:
    """FP6-LLM (usyd-fsalab/fp6_llm, ``fp6_llm.linear_forward_cuda``): FP16 activations x FP6 E3M2 weights in its own
    prepacked layout ([N, 3 K / 16] int32; any words are valid FP6 data) with one FP16 scale per output channel; it
    needs N % 256 == 0. Timed eagerly (module docstring), the fastest of FP6_LLM_SPLIT_K."""
    torch = _torch()
    import fp6_llm

    if n % 256:
        raise ValueError(f"FP6-LLM needs N % 256 == 0, got N={n}")
    wbytes = n * (3 * k // 16) * 4 + n * 2
    copies = copies_for(wbytes, l2)
    packed = [torch.randint(-2**31, 2**31 - 1, (n, 3 * k // 16), dtype=torch.int32, device="cuda")
              for _ in range(copies)]
    scales = [(torch.rand(n, device="cuda") * 0.01 + 0.001).half() for _ in range(copies)]

    def timer(m: int) -> tuple[float, dict]:
        x = torch.randn(m, k, device="cuda").half()
        best = None
        for split in FP6_LLM_SPLIT_K:
            calls = [(lambda w=w, s=s, split=split: fp6_llm.linear_forward_cuda(x, w, s, split))
                     for w, s in zip(packed, scales)]
            us = time_eager(calls, replays=max(3, replays // 3))
            if best is None or us < best[0]:
                best = (us, split)
        return best[0], {"split_k": best[1]}

    return Setup(wbytes, lambda m: [], timer=timer)


def setup_read_stream(nbytes: int, l2: int) -> Setup:
    """A read-only stream of ``nbytes`` (a Triton kernel that reads every word once, trt_woq._read_stream; rotated
    over copies past L2): the reference for what reading that many weight bytes costs on this device."""
    from trt_woq import _read_stream

    torch = _torch()
    words = max(nbytes // 4, 1)
    copies = copies_for(nbytes, l2)
    bufs = [torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device="cuda") for _ in range(copies)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.empty(sms * _read_stream.PROGRAMS_PER_SM, dtype=torch.int32, device="cuda")

    def make_calls(m: int):
        return [(lambda b=b: _read_stream.read_all(b, out, sms)) for b in bufs]

    return Setup(words * 4, make_calls)


# ---- timing ------------------------------------------------------------------------------------------------------
def time_calls(calls: list[Callable[[], None]], min_calls: int = 24, replays: int = 25) -> float:
    """Median microseconds per call, from CUDA-graph replays of the calls in a cycle."""
    result = time_interleaved([calls], min_calls, replays)[0]
    if isinstance(result, Exception):
        raise result
    return result


def time_eager(calls: list[Callable[[], None]], min_calls: int = 24, replays: int = 25) -> float:
    """Median microseconds per call of ``calls`` launched back to back from Python on the current (default) stream
    between two events, cycling through them at least ``min_calls`` times per replay: for peers that launch on the
    legacy default stream."""
    torch = _torch()
    per = len(calls) * math.ceil(min_calls / len(calls))
    for c in calls:  # warm-up (module loads, allocator)
        c()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        for i in range(per):
            calls[i % len(calls)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per)
    return statistics.median(times)


def _capture(calls: list[Callable[[], None]], min_calls: int, stream):
    """One CUDA graph cycling through ``calls`` (at least ``min_calls`` launches), replayed once; (graph, calls)."""
    torch = _torch()
    per_graph = len(calls) * math.ceil(min_calls / len(calls))
    with torch.cuda.stream(stream):
        for c in calls:  # warm-up (cuBLAS handles, lazy module loads) outside the capture
            c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            calls[i % len(calls)]()
    graph.replay()
    torch.cuda.synchronize()
    return graph, per_graph


def time_interleaved(methods: list[list[Callable[[], None]]], min_calls: int = 24,
                     replays: int = 25) -> list[float | Exception]:
    """Median microseconds per call of each method, its replays taken in turn with the other methods' so that all
    see the same clock and power state (module docstring). A method whose warm-up or capture fails gets its exception
    in place of a time; the others are still timed."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    captured: list = []
    for calls in methods:
        try:
            captured.append(_capture(calls, min_calls, side))
        except Exception as e:  # reported in this method's row
            captured.append(e)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times: list[list[float]] = [[] for _ in methods]
    for _ in range(replays):
        for c, t in zip(captured, times):
            if isinstance(c, Exception):
                continue
            graph, per_graph = c
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            t.append(start.elapsed_time(end) * 1e3 / per_graph)
    return [c if isinstance(c, Exception) else statistics.median(t) for c, t in zip(captured, times)]


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written (as nvbandwidth does)."""
    torch = _torch()
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    us = time_calls([lambda: dst.copy_(src)], min_calls=8, replays=15)
    del src, dst
    return 2 * nbytes / us / 1e3


# ---- driver ------------------------------------------------------------------------------------------------------
def build_setups(lib, k, n, l2, methods, sweep_candidates, replays=25):
    setups = {}
    for name in methods:
        try:
            if name == "int8_pc":
                setups[name] = setup_ours(lib, k, n, 8, -1, False, "fp16", l2)
            elif name == "int4_g128":
                setups[name] = setup_ours(lib, k, n, 4, 128, False, "fp16", l2)
            elif name == "int4_g128_asym":
                setups[name] = setup_ours(lib, k, n, 4, 128, True, "fp16", l2)
            elif name == "fp6_pc":
                setups[name] = setup_ours(lib, k, n, 6, -1, False, "fp16", l2)
            elif name == "int4_g128_bf16":
                setups[name] = setup_ours(lib, k, n, 4, 128, False, "bf16", l2)
            elif name == "w8a8_pc":
                setups[name] = setup_ours(lib, k, n, 8, -1, False, "fp16", l2, act_mode=K.ActMode.W8A8_DYNAMIC)
            elif name.startswith("w8a8_pc@"):  # one W8A8 candidate by name instead of the dispatch's choice
                setups[name] = setup_ours(lib, k, n, 8, -1, False, "fp16", l2, act_mode=K.ActMode.W8A8_DYNAMIC,
                                          candidate=lib.candidates().index(name.split("@")[1]))
            elif name == "w8a8_g128":
                setups[name] = setup_ours(lib, k, n, 8, 128, False, "fp16", l2, act_mode=K.ActMode.W8A8_DYNAMIC)
            elif name == "torch_int_mm":
                setups[name] = setup_torch_int_mm(k, n, l2, quantize=False)
            elif name == "torch_int_mm_quant":
                setups[name] = setup_torch_int_mm(k, n, l2, quantize=True)
            elif name == "cublas_fp16":
                setups[name] = setup_cublas(k, n, "fp16", l2)
            elif name == "cublas_bf16":
                setups[name] = setup_cublas(k, n, "bf16", l2)
            elif name == "torch_int4":
                setups[name] = setup_torch_int4(k, n, l2)
            elif name == "marlin":
                setups[name] = setup_marlin(k, n, l2)
            elif name == "fp6_llm":
                setups[name] = setup_fp6_llm(k, n, l2, replays)
            else:
                raise ValueError(f"unknown method {name}")
        except Exception as e:  # a baseline that fails to set up is reported, not fatal
            setups[name] = e
    if sweep_candidates == "fp6":  # FP6 per channel on every candidate that serves FP6
        for cid, cname in enumerate(lib.candidates()):
            if K.WeightFormat.FP6_E3M2 in lib.candidate_info(cid).weight_formats:
                setups[f"fp6_pc@{cname}"] = setup_ours(lib, k, n, 6, -1, False, "fp16", l2, candidate=cid)
    elif sweep_candidates:
        names = lib.candidates()
        for cid, cname in enumerate(names):
            if cname.startswith("gemv") or sweep_candidates == "all":
                setups[f"int4_g128@{cname}"] = setup_ours(lib, k, n, 4, 128, False, "fp16", l2, candidate=cid)
            if cname.startswith("gemv"):
                setups[f"int8_pc@{cname}"] = setup_ours(lib, k, n, 8, -1, False, "fp16", l2, candidate=cid)
    return setups


def sm_clock_mhz() -> int | None:
    """The current SM clock of device 0 (NVML through torch), or None where NVML is not available."""
    try:
        return int(_torch().cuda.clock_rate(0))
    except Exception:  # no nvidia-ml-py, or NVML refused: the figure is informative only
        return None


def read_streams(setups, l2) -> dict[str, float]:
    """GB/s of a read-only stream of each of our methods' weight bytes, timed together (module docstring)."""
    ours = [(name, st) for name, st in setups.items() if name in OURS and not isinstance(st, Exception)]
    streams = [setup_read_stream(st.weight_bytes, l2) for _, st in ours]
    times = time_interleaved([rs.make_calls(1) for rs in streams])
    return {name: rs.weight_bytes / us / 1e3 for (name, _), rs, us in zip(ours, streams, times)
            if not isinstance(us, Exception)}


def run(shapes, ms, methods, sweep_candidates=False, log=print, settle_s: float = 2.0, replays: int = 25,
        checkpoint: Callable[[dict], None] | None = None) -> dict:
    """The benchmark (module docstring) as a JSON-able dict; ``checkpoint`` gets the result so far after every
    (K, N), so that a run cut short keeps what it measured."""
    torch = _torch()
    lib = K.load()
    props = torch.cuda.get_device_properties(0)
    l2 = int(getattr(props, "L2_cache_size", 50 << 20))
    copy_gbps = copy_bandwidth()
    log(f"device {props.name}, sm {props.major}{props.minor}, L2 {l2 >> 20} MiB, copy bandwidth {copy_gbps:.0f} GB/s "
        f"(read + write)")
    rows: list[Row] = []
    sm_mhz: dict[str, int | None] = {}
    read_gbps: dict[str, dict[str, float]] = {}
    after_compute_bound = False
    for k, n in shapes:
        setups = build_setups(lib, k, n, l2, methods, sweep_candidates, replays)
        reads = read_gbps[f"{k}x{n}"] = read_streams(setups, l2)
        log(f"{k}x{n}: read-only stream of the weight bytes " +
            ", ".join(f"{name} {gbps:.0f} GB/s" for name, gbps in reads.items()))
        for m in ms:
            if after_compute_bound and m <= 64 and settle_s > 0:
                time.sleep(settle_s)  # leave the power cap the previous group's GEMMs ran into (module docstring)
            timed = []  # (name, setup, calls) of the methods timed together in this group
            for name, st in setups.items():
                if isinstance(st, Exception):
                    rows.append(Row(k, n, m, name, None, 0, error=f"{type(st).__name__}: {st}"))
                    continue
                if st.timer is not None:  # timed on its own, before the graph-timed group
                    try:
                        us, extra = st.timer(m)
                        rows.append(Row(k, n, m, name, us, st.weight_bytes, extra=extra))
                    except Exception as e:
                        rows.append(Row(k, n, m, name, None, st.weight_bytes, error=f"{type(e).__name__}: {e}"))
                    continue
                if "@" in name:
                    cname = name.split("@")[1]
                    bits, group = {"int4": (4, 128), "fp6_": (6, -1)}.get(name[:4], (8, -1))
                    mode = K.ActMode.W8A8_DYNAMIC if name.startswith("w8a8") else K.ActMode.WEIGHT_ONLY
                    cid = lib.candidates().index(cname)
                    probe = K.make_params(m=m, n=n, k=k, bits=bits, group_size=group, act_mode=mode)
                    if lib.supports(cid, probe, props.major * 10 + props.minor) != K.Status.OK:
                        continue
                try:
                    timed.append((name, st, st.make_calls(m)))
                except Exception as e:
                    rows.append(Row(k, n, m, name, None, st.weight_bytes, error=f"{type(e).__name__}: {e}"))
            results = time_interleaved([calls for _, _, calls in timed], replays=replays)
            for (name, st, _), us in zip(timed, results):
                if isinstance(us, Exception):
                    rows.append(Row(k, n, m, name, None, st.weight_bytes, error=f"{type(us).__name__}: {us}"))
                else:
                    rows.append(Row(k, n, m, name, us, st.weight_bytes))
            del timed
            mhz = sm_mhz[f"{k}x{n}/m{m}"] = sm_clock_mhz()
            after_compute_bound = m >= 256
            log(summary_line(rows, k, n, m, reads, mhz))
            if any(name.startswith(("w8a8", "torch_int_mm")) for name in setups):
                log(w8a8_line(rows, k, n, m))
        del setups
        torch.cuda.empty_cache()
        if checkpoint:
            done = shapes[:shapes.index((k, n)) + 1]
            checkpoint(result_dict(lib, props, torch, done, ms, rows, copy_gbps, read_gbps, l2, sm_mhz))
    return result_dict(lib, props, torch, shapes, ms, rows, copy_gbps, read_gbps, l2, sm_mhz)


def result_dict(lib, props, torch, shapes, ms, rows, copy_gbps, read_gbps, l2, sm_mhz) -> dict:
    """The JSON of a run: its rows with their bandwidth fractions, the device and the dispatch's INT4 picks."""
    dispatch = {}
    for k, n in shapes:
        for m in ms:
            p = K.make_params(m=m, n=n, k=k, bits=4, group_size=128)
            cid = lib.dispatch(p, props.major * 10 + props.minor)
            dispatch[f"{k}x{n}/m{m}"] = lib.candidate_name(cid) if cid >= 0 else None
    out_rows = []
    cublas_of = {(r.k, r.n, r.m): r for r in rows if r.method == "cublas_fp16"}
    for r in rows:
        cublas = cublas_of.get((r.k, r.n, r.m))
        read = read_gbps.get(f"{r.k}x{r.n}", {}).get(r.method)
        out_rows.append(dict(k=r.k, n=r.n, m=r.m, method=r.method, us=r.us, weight_bytes=r.weight_bytes, gbps=r.gbps,
                             frac_cublas_bw=(r.gbps / cublas.gbps if r.gbps and cublas and cublas.gbps else None),
                             frac_read=(r.gbps / read if r.gbps and read else None),
                             frac_copy=(r.gbps / copy_gbps if r.gbps else None), tflops=r.tflops, error=r.error,
                             **r.extra))
    return {
        "device": props.name,
        "sm": props.major * 10 + props.minor,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "torch": torch.__version__,
        "copy_gbps": copy_gbps,
        "read_gbps": read_gbps,
        "l2_bytes": l2,
        "dispatch_int4_g128": dispatch,
        "sm_mhz": sm_mhz,
        "rows": out_rows,
    }


def _get(rows, k, n, m, method):
    for r in rows:
        if (r.k, r.n, r.m, r.method) == (k, n, m, method):
            return r
    return None


W8A8_METHODS = ("w8a8_pc", "w8a8_g128", "torch_int_mm", "torch_int_mm_quant")  # and w8a8_pc@CANDIDATE


def w8a8_line(rows, k, n, m) -> str:
    """The W8A8 comparison of one (K, N, M): us and speedup over cuBLAS FP16 of each W8A8-related method."""
    base = _get(rows, k, n, m, "cublas_fp16")
    parts = []
    by_candidate = sorted({r.method for r in rows if r.method.startswith("w8a8_pc@")})
    for meth in ("int8_pc",) + W8A8_METHODS + tuple(by_candidate):
        r = _get(rows, k, n, m, meth)
        if r is None:
            continue
        if not r.us:
            parts.append(f"{meth} -")
            continue
        x = f" ({base.us / r.us:.2f}x)" if base is not None and base.us else ""
        parts.append(f"{meth} {r.us:.1f}{x}")
    return f"{k}x{n} m={m} W8A8 us (x cuBLAS FP16): " + ", ".join(parts)


def _speedup(rows, k, n, m, baseline, ours) -> float | None:
    """Baseline time / our time at (k, n, m), or None where either is missing."""
    rb, ro = _get(rows, k, n, m, baseline), _get(rows, k, n, m, ours)
    return rb.us / ro.us if rb and ro and rb.us and ro.us else None


def _bw_fracs(rows, k, n, m, method, reads) -> tuple[float | None, float | None]:
    """Our weight bandwidth at (k, n, m) as fractions of cuBLAS FP16's there and of the read-only stream's."""
    r, c = _get(rows, k, n, m, method), _get(rows, k, n, m, "cublas_fp16")
    if not (r and r.us):
        return None, None
    read = reads.get(method) if reads else None
    return (r.gbps / c.gbps if c and c.us else None), (r.gbps / read if read else None)


def summary_line(rows, k, n, m, reads=None, mhz=None) -> str:
    def us(meth):
        r = _get(rows, k, n, m, meth)
        return f"{r.us:8.1f}" if r and r.us else "     n/a"

    def x(v):
        return f"{v:5.2f}x" if v else "   n/a"

    def pct(v):
        return f"{100 * v:5.1f}%" if v else "   n/a"

    i4_cub, i4_read = _bw_fracs(rows, k, n, m, "int4_g128", reads)
    i8_cub, i8_read = _bw_fracs(rows, k, n, m, "int8_pc", reads)
    i4 = _get(rows, k, n, m, "int4_g128")
    line = (f"{k:>6}x{n:<6} M={m:<4}| " + " ".join(us(b) for b in BASELINES) + " | " + " ".join(us(o) for o in OURS)
            + f" | {x(_speedup(rows, k, n, m, 'cublas_fp16', 'int4_g128'))} "
            f"{x(_speedup(rows, k, n, m, 'marlin', 'int4_g128'))} "
            f"{x(_speedup(rows, k, n, m, 'cublas_fp16', 'int8_pc'))}"
            f" | {pct(i4_cub)} {pct(i4_read)} {pct(i8_cub)} {pct(i8_read)} | "
            f"{f'{i4.tflops:6.1f}' if i4 and i4.us else '   n/a'} | {mhz if mhz else 'n/a':>6}")
    others = [r for r in rows if (r.k, r.n, r.m) == (k, n, m) and r.us and "@" not in r.method
              and r.method not in BASELINES + OURS]  # methods asked for by name (fp6_pc, int4_g128_bf16)
    if others:
        line += "  " + " ".join(f"{r.method}={r.us:.1f}" for r in others)
        for base in ("cublas_fp16", "fp6_llm"):
            if _speedup(rows, k, n, m, base, "fp6_pc"):
                line += f" fp6_pc/{base}={_speedup(rows, k, n, m, base, 'fp6_pc'):.2f}x"
    extra = [r for r in rows if (r.k, r.n, r.m) == (k, n, m) and "@" in r.method and r.us]
    if extra:
        line += "\n      " + " ".join(f"{r.method.split('@')[0][:4]}@{r.method.split('@')[1].replace('gemv_mma_', '')}"
                                       f"={r.us:.1f}" for r in extra)
    errors = [r for r in rows if (r.k, r.n, r.m) == (k, n, m) and r.error]
    for r in errors:
        line += f"\n    {r.method}: {r.error[:200]}"
    return line


HEADER = (f"{'K x N':>13} {'M':<5}| {'cuBLAS16':>8} {'cuBLASbf':>8} {'torchi4':>8} {'Marlin':>8} | {'int8pc':>8} "
          f"{'int4g128':>8} {'int4asym':>8} | {'i4/cuB':>6} {'i4/Mar':>6} {'i8/cuB':>6} | {'i4%cuB':>6} {'i4%rd':>6} "
          f"{'i8%cuB':>6} {'i8%rd':>6} | {'i4TF/s':>6} | {'SM MHz':>6}   (times in us; x = baseline time / ours; "
          f"%cuB / %rd: our weight GB/s over cuBLAS FP16's / over a read-only stream of our bytes)")


ROW_FIELDS = ("k", "n", "m", "method", "us", "weight_bytes")


def load_run(path: str) -> dict:
    """A run saved by ``--json``; ValueError with a one-line message naming ``path`` when it is not one."""
    what = "a run saved by python -m trt_woq.bench --json"
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a folder, expected {what}")
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not {what} ({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    rows = saved.get("rows") if isinstance(saved, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and set(ROW_FIELDS) <= r.keys() for r in rows):
        raise ValueError(f"{path}: not {what} (needs \"rows\": [{{{', '.join(ROW_FIELDS)}}}, ...])")
    return saved


def _result_file(path: str):
    """The command-line tools' output checks (graph_passes.files.Outputs) for a result file a run may overwrite."""
    from graph_passes.files import Outputs  # lazily: the benchmark's own imports stay torch and the kernels

    out = Outputs([], force=True)
    out.add(path, "result file", "give a file name")
    return out


def output_problem(path: str) -> str | None:
    """Why ``path`` cannot take a result file (checked before a run that takes minutes), or None."""
    from graph_passes.errors import UserError

    try:
        _result_file(path)
    except UserError as exc:
        return str(exc)
    return None


def write_whole(path: str, text: str) -> None:
    """Writes ``path`` completely or not at all (a run stopped during a checkpoint keeps the previous file)."""
    with _result_file(path) as out:
        out.write_text(path, text)
        out.commit()


def cli_error(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _rows_of(result: dict) -> list[Row]:
    return [Row(r["k"], r["n"], r["m"], r["method"], r["us"], r["weight_bytes"], r.get("error") or "")
            for r in result["rows"]]


def m_range_label(lo: int, hi: int | None) -> str:
    return f"{lo}-{hi}" if hi is not None else f">={lo}"


def summarize(result: dict) -> list[dict]:
    """Per (K, N) and M range (M_RANGES): min and geometric mean over the range's M of cuBLAS FP16 time / ours
    (INT4 g128 and INT8 pc) and Marlin time / ours (INT4 g128). Ranges with no measured M are left out; a ratio with no
    measured pair in a range is None."""
    rows = _rows_of(result)
    out = []
    for k, n in sorted({(r.k, r.n) for r in rows}, key=lambda t: (t[0] * t[1], t[0])):
        for lo, hi in M_RANGES:
            ms = sorted({r.m for r in rows if (r.k, r.n) == (k, n) and r.m >= lo and (hi is None or r.m <= hi)})
            if not ms:
                continue
            entry = dict(k=k, n=n, m_range=m_range_label(lo, hi), ms=len(ms))
            for key, base, ours in (("int4_vs_cublas", "cublas_fp16", "int4_g128"), ("int4_vs_marlin", "marlin",
                                    "int4_g128"), ("int8_vs_cublas", "cublas_fp16", "int8_pc")):
                vals = [v for v in (_speedup(rows, k, n, m, base, ours) for m in ms) if v]
                entry[key] = (dict(min=min(vals), geomean=math.exp(sum(map(math.log, vals)) / len(vals)), n=len(vals))
                              if vals else None)
            out.append(entry)
    return out


def summary_table(result: dict) -> str:
    """summarize() as a markdown table: min / geomean per (K, N, M range)."""
    head = ("| K x N | M | INT4 g128 x cuBLAS FP16 (min / geomean) | INT4 g128 x Marlin (min / geomean) "
            "| INT8 pc x cuBLAS FP16 (min / geomean) |")
    out = [head, "|" + " --- |" * (head.count("|") - 1)]

    def cell(v):
        return f"{v['min']:.2f}x / {v['geomean']:.2f}x" if v else "n/a"

    for e in summarize(result):
        out.append(f"| {e['k']} x {e['n']} | {e['m_range']} | {cell(e['int4_vs_cublas'])} "
                   f"| {cell(e['int4_vs_marlin'])} | {cell(e['int8_vs_cublas'])} |")
    return "\n".join(out)


def markdown(result: dict) -> str:
    """The JSON of a run as the markdown table of docs/performance.md (one row per (K, N, M)); the time columns of
    methods the run did not include are left out."""
    rows = _rows_of(result)
    reads = result.get("read_gbps", {})
    clocks = result.get("sm_mhz", {})
    keys = sorted({(r.k, r.n, r.m) for r in rows}, key=lambda t: (t[0] * t[1], t[0], t[2]))
    names = {"cublas_fp16": "cuBLAS fp16", "cublas_bf16": "cuBLAS bf16", "torch_int4": "torch int4", "marlin": "Marlin",
             "int8_pc": "ours INT8 pc", "int4_g128": "ours INT4 g128", "int4_g128_asym": "ours INT4 g128 asym"}
    methods = [meth for meth in BASELINES + OURS if any(r.method == meth for r in rows)]
    head = ("| K x N | M | " + " | ".join(names[meth] for meth in methods) + " | INT4 / cuBLAS | INT4 / Marlin "
            "| INT8 / cuBLAS | INT4 BW % cuBLAS | INT4 BW % read | INT8 BW % cuBLAS | INT8 BW % read | INT4 TFLOP/s "
            "| SM MHz |")
    out = [head, "|" + " --- |" * (head.count("|") - 1)]

    def f(v):
        return f"{v:.1f}" if v else "n/a"

    def x(v):
        return f"{v:.2f}x" if v else "n/a"

    def pct(v):
        return f"{100 * v:.0f}%" if v else "n/a"

    for k, n, m in keys:
        times = [f(r.us if r else None) for r in (_get(rows, k, n, m, meth) for meth in methods)]
        i4c, i4r = _bw_fracs(rows, k, n, m, "int4_g128", reads.get(f"{k}x{n}"))
        i8c, i8r = _bw_fracs(rows, k, n, m, "int8_pc", reads.get(f"{k}x{n}"))
        i4 = _get(rows, k, n, m, "int4_g128")
        out.append(f"| {k} x {n} | {m} | " + " | ".join(times) +
                   f" | {x(_speedup(rows, k, n, m, 'cublas_fp16', 'int4_g128'))} "
                   f"| {x(_speedup(rows, k, n, m, 'marlin', 'int4_g128'))} "
                   f"| {x(_speedup(rows, k, n, m, 'cublas_fp16', 'int8_pc'))} | {pct(i4c)} | {pct(i4r)} | {pct(i8c)} "
                   f"| {pct(i8r)} | {f(i4.tflops if i4 and i4.us else None)} "
                   f"| {clocks.get(f'{k}x{n}/m{m}') or 'n/a'} |")
    return "\n".join(out)


def dumps(result: dict) -> str:
    """A run as JSON with one line per top-level key and per problem (the rows of one K x N x M, or of one K x N
    when rows have no method): greppable and diffable; ``json.load`` reads back exactly the run."""
    def line_key(row):
        if not isinstance(row, dict):
            return id(row)
        return tuple(row.get(f) for f in (("k", "n", "m") if "method" in row else ("k", "n", "bits")))

    def entry(key, value):
        if not isinstance(value, list):
            return f" {json.dumps(key)}: {json.dumps(value)}"
        lines, last = [], object()
        for v in value:
            lk = line_key(v)
            if lines and lk == last:
                lines[-1] += ", " + json.dumps(v)
            else:
                lines.append("  " + json.dumps(v))
            last = lk
        return f" {json.dumps(key)}: [\n" + ",\n".join(lines) + "\n ]"

    return "{\n" + ",\n".join(entry(k, v) for k, v in result.items()) + "\n}\n"


def parse_shapes(text: str):
    out = []
    for item in text.split(","):
        k, n = item.lower().split("x")
        out.append((int(k), int(n)))
    return out


def run_one(spec: str) -> None:
    """A few plain launches of one case (for ncu): METHOD,M,K,N[,CANDIDATE]."""
    torch = _torch()
    method, m, k, n, *cand = spec.split(",")
    m, k, n = int(m), int(k), int(n)
    lib = K.load()
    if cand:  # METHOD,M,K,N,CANDIDATE_NAME: that candidate instead of the dispatch's choice
        bits, group, zeros = {"int8_pc": (8, -1, False), "int4_g128": (4, 128, False),
                              "int4_g128_asym": (4, 128, True)}[method]
        st = setup_ours(lib, k, n, bits, group, zeros, "fp16", 0, candidate=lib.candidates().index(cand[0]))
    else:
        st = build_setups(lib, k, n, 0, [method], False)[method]
    if isinstance(st, Exception):
        raise st
    calls = st.make_calls(m)
    for _ in range(3):
        calls[0]()
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trt_woq.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=parse_shapes, default=SHAPES, help="KxN,KxN,... (default: eight LLM shapes)")
    ap.add_argument("--m", default=",".join(map(str, M_VALUES)),
                    help="comma-separated M values (default: 1..16, 24, 32, 48, 64, 96, 128, ..., 1024, 2048, 4096)")
    ap.add_argument("--methods", help="comma-separated; also int4_g128_bf16, fp6_pc, fp6_llm, "
                    + ", ".join(W8A8_METHODS) + ", w8a8_pc@CANDIDATE_NAME (default: cuBLAS FP16 and BF16, torch "
                    "int4, Marlin when importable, and ours; fp6_pc and FP6-LLM when FP6-LLM is importable)")
    ap.add_argument("--replays", type=int, default=25, help="timed replays per method and group (default 25)")
    ap.add_argument("--candidates", nargs="?", const="gemv", choices=["gemv", "all", "fp6"],
                    help="also time every GEMV candidate by id (all: every candidate, INT4 g128; fp6: FP6 per channel "
                         "on every candidate serving FP6, only)")
    ap.add_argument("--json", default="bench.json", help="where to write the results (default bench.json)")
    ap.add_argument("--settle", type=float, default=2.0, metavar="SECONDS",
                    help="pause before an M <= 64 group that follows an M >= 256 group (default 2; 0: none)")
    ap.add_argument("--one", help="METHOD,M,K,N: launch one case a few times and exit (for ncu)")
    ap.add_argument("--markdown", metavar="JSON", help="print the markdown table of a saved run and exit (no GPU)")
    args = ap.parse_args(argv)
    if args.markdown:
        try:
            saved = load_run(args.markdown)
        except ValueError as exc:
            return cli_error(ap.prog, str(exc))
        print(markdown(saved) + "\n\n" + summary_table(saved))
        return 0
    if not args.one and output_problem(args.json):
        return cli_error(ap.prog, f"--json {output_problem(args.json)}")
    try:
        torch = _torch()
    except ImportError:
        return cli_error(ap.prog, "the benchmark needs torch with CUDA")
    if not torch.cuda.is_available():
        return cli_error(ap.prog, "no CUDA device visible: the benchmark needs a GPU")
    if args.one:
        run_one(args.one)
        return 0
    ms = [int(x) for x in args.m.split(",")]
    print(HEADER, flush=True)
    methods = args.methods.split(",") if args.methods else \
        [b for b in BASELINES if b != "marlin" or marlin_available()] + list(OURS) \
        + (["fp6_pc", "fp6_llm"] if fp6_llm_available() else [])
    command = "python -m trt_woq.bench " + " ".join(sys.argv[1:] if argv is None else argv)

    def save(result):
        result["command"] = command
        write_whole(args.json, dumps(result))

    result = run(args.shapes, ms, methods, args.candidates, log=lambda s: print(s, flush=True), settle_s=args.settle,
                 replays=args.replays, checkpoint=save)
    save(result)
    print("\n" + summary_table(result))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
