"""Device test of the W8A8 kernels (act_mode W8A8_DYNAMIC) through the public C ABI.

    TRT_WOQ_KERNELS_PATH=build/plugins/kernels/libtrt_woq_kernels.so PYTHONPATH=python:. \\
        python3 tests/device/w8a8_check.py [--seed S] [--quick]

1. Quantize step, bit for bit: the codes (in layout 1's k order), scales, offsets and code sums the kernel leaves in its
   workspace equal graph_passes.quantizers.activations' (float32 steps) for every row.
2. Output: every W8A8 candidate and the dispatch, M in {1, 5, 16} (the weight-only GEMV path: reference X @ W) and
   {17, 33, 127, 130, 257} (the INT8 GEMMs: reference graph_passes.op.w8a8_evaluate, the exact integer GEMM per group
   and the offset correction in float64), plus 333 and 1000 at K = 4096; N not a multiple of the tiles (70, 130,
   258), K of 3 to 64 K tiles (192, 384, 1088, 1152, 4096; the wgmma candidates take K % 128 == 0, so every
   warp-specialized tile there runs K-split slices); and 512 x 4610 per channel at M = 17 / 127 / 333 / 1000,
   where the warp-specialized tiles fill whole waves and split only the last one; 2048 x 4610 at M = 1000, where
   the ping-pong tiles' CTAs take two or three items of 16 stages each (both warpgroups, more stages than the
   ring); per channel, 4096 x 516 (N % 4 == 0: the 8-byte stores of the lean tiles), 6144 x 130 and 17408 x 70
   (the quantize kernel's rows held in registers, two chunks per thread, and rows read twice); group
   sizes -1/32/64/128/256 where they divide K; symmetric and asymmetric activations; bias on/off; FP16 and BF16.
   Fresh random data each run (seed printed): weights quantized and packed by graph_passes, activations with a
   different magnitude per row and a few outlier channels. Outputs poisoned with NaN before each launch. Pass when
   the normwise relative error is below the output type's tolerance and the largest error below 4x that of max|Y|.
3. Refusals: zero points (asymmetric weights) come back UNSUPPORTED_OPTION.

`--quick`: per-channel weights and one grouped shape only, fewer M (every candidate, both offsets modes, FP16 and BF16,
every fused activation on one shape). `--only NAME,...`: those W8A8 candidates (and the dispatch) instead of all.

Prints one line per failure and a final `N passed, N failed`; exits non-zero on any failure.

`--quantize-share KxN,...` instead prints, per shape and M >= 1024, the device time of the quantize kernel and of the
whole W8A8 call (dispatch's candidate, torch.profiler over 20 calls) and the quantize kernel's share.
`--timeline KxNxM[@NAME],...` instead prints per case the quantize kernel's and the GEMM's device time and the gap
between them (negative: overlapped by the programmatic launch), medians over 20 calls after an L2 flush each.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

try:
    import torch
    from kernels_check import DTYPES, Tally, launch_poisoned  # tests/device/: the same tally and poisoned launch
except ImportError:  # covered_combinations() is read on machines without torch
    torch = None

from graph_passes import op
from graph_passes.layouts import interleaved_v1
from graph_passes.quantize import quantize_rtn
from graph_passes.quantizers.activations import quantize_activations
from graph_passes.registry.epilogues import EPILOGUES
from trt_woq import kernels as K

# Normwise relative tolerance: FP32 accumulation of the dequantized groups plus the output's rounding.
TOL = {"fp16": 1e-3, "bf16": 8e-3}
CLIP = {"clip_min": -0.5, "clip_max": 0.75}
PERM16 = np.array([0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15])
SMALL_M = 16


def covered_combinations() -> set[tuple[str, str, str, str]]:
    """(weight format, activation mode, op, epilogue) names, as kernels.h's enums, that this check runs on every W8A8
    candidate (read by tests/plugins/kernels/test_registry_walk.py without a GPU)."""
    return {("int8", "w8a8_dynamic", "linear", ep.name) for ep in EPILOGUES}


def _act_numpy(x: torch.Tensor) -> np.ndarray:
    """The activation values as float32 numpy (exact for fp16 and bf16)."""
    return x.float().cpu().numpy()


_WEIGHTS: dict = {}


def quantized_weight(k, n, group, act, rng):
    """A fresh random weight quantized by graph_passes, one per (K, N, group, act) of the run."""
    key = (k, n, group, act)
    if key not in _WEIGHTS:
        w = rng.standard_normal((k, n)) * 0.05
        w[rng.integers(0, k, 3)] *= 4.0
        _WEIGHTS[key] = quantize_rtn(w.astype(np.float32), 8, group, False, act)
    return _WEIGHTS[key]


class Problem:
    def __init__(self, m, k, n, group, act, asym, bias, rng, epilogue=EPILOGUES.get("none")):
        self.m, self.k, self.n, self.group, self.act, self.asym = m, k, n, group, act, asym
        self.epilogue = epilogue
        self.clip = CLIP if epilogue.params else {}
        dtype = DTYPES[act]
        qw = quantized_weight(k, n, group, act, rng)
        self.attrs = op.WoqAttributes(bits=8, group_size=group, in_features=k, out_features=n, has_bias=int(bias),
                                      act_mode=1, act_asymmetric=int(asym))
        packed = interleaved_v1.pack(qw.u, 8)
        self.packed = torch.from_numpy(packed).cuda()
        self.scales = torch.from_numpy(qw.scales).to(dtype).cuda()
        sums = op.weight_sums_of(qw.u, 8, group)
        self.weight_sums = torch.from_numpy(sums).cuda() if asym else None
        self.bias = torch.from_numpy(rng.standard_normal(n) * 0.1).to(dtype).cuda() if bias else None
        x = rng.standard_normal((m, k)) * rng.uniform(0.05, 4.0, (m, 1)) + (rng.uniform(-1, 1, (m, 1)) if asym else 0)
        x[:, rng.integers(0, k, 2)] *= 8.0  # outlier channels, as in transformers
        self.x = torch.from_numpy(x).to(dtype).cuda()
        xf = _act_numpy(self.x)
        scales = self.scales.float().cpu().numpy()
        if m <= SMALL_M:  # the weight-only path: X @ W
            self.ref = xf.astype(np.float64) @ interleaved_v1.dequantize_reference(packed, scales, None, k, n, 8, group)
        else:
            self.ref = op.w8a8_evaluate(xf, packed, scales, sums if asym else None, self.attrs)
        if bias:
            self.ref = self.ref + self.bias.double().cpu().numpy()
        self.ref = epilogue.reference(self.ref, **self.clip)
        self.xf = xf

    def label(self) -> str:
        return (f"m={self.m} k={self.k} n={self.n} g{self.group} {self.act}{' asym' if self.asym else ''}"
                f"{' bias' if self.bias is not None else ''} {self.epilogue.name}")

    def params(self, out, zeros=None) -> K.LinearParams:
        return K.make_params(m=self.m, n=self.n, k=self.k, bits=8, group_size=self.group, act=self.act,
                             x=self.x.data_ptr(), packed_weight=self.packed.data_ptr(),
                             scales=self.scales.data_ptr(), zeros=zeros,
                             bias=self.bias.data_ptr() if self.bias is not None else None, output=out.data_ptr(),
                             act_mode=K.ActMode.W8A8_DYNAMIC, act_asymmetric=self.asym,
                             weight_sums=self.weight_sums.data_ptr() if self.weight_sums is not None else None,
                             epilogue=K.Epilogue[self.epilogue.name.upper()], **self.clip)


def check_workspace(pr: Problem, ws: torch.Tensor, label: str, tally: Tally) -> None:
    """The quantize kernel's codes / scales / offsets / code sums (workspace layout of src/w8a8/w8a8.cu) vs the
    numpy steps."""
    qa = quantize_activations(pr.xf, pr.group, pr.asym)
    m, k = pr.m, pr.k
    groups = qa.scales.shape[-1]
    codes = ws[:m * k].cpu().numpy().view(np.int8).reshape(m, k // 16, 16)
    expect = qa.codes.reshape(m, k // 16, 16)[:, :, PERM16]
    off = (m * k + 255) // 256 * 256
    pbytes = (m * groups * 4 + 255) // 256 * 256
    scales = ws[off:off + m * groups * 4].cpu().numpy().view(np.float32).reshape(m, groups)
    offsets = ws[off + pbytes:off + pbytes + m * groups * 4].cpu().numpy().view(np.float32).reshape(m, groups)
    sums = ws[off + 2 * pbytes:off + 2 * pbytes + m * groups * 4].cpu().numpy().view(np.int32).reshape(m, groups)
    same = np.array_equal(codes, expect) and np.array_equal(scales, qa.scales) and \
        (not pr.asym or np.array_equal(offsets, qa.offsets)) and np.array_equal(sums, qa.row_sums)
    tally.check(same, f"{label} quantize bit-exact", f"codes differ at {int((codes != expect).sum())} places, "
                f"scales at {int((scales != qa.scales).sum())}")


def run_case(lib: K.Kernels, pr: Problem, candidates: list[int], tally: Tally) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    tol = TOL[pr.act]
    ref_norm = float(np.linalg.norm(pr.ref))
    ref_max = float(np.abs(pr.ref).max())
    for cand in candidates:
        probe = pr.params(torch.empty(1, device="cuda"))
        if cand != -1 and lib.supports(cand, probe) != K.Status.OK:
            continue
        name = "auto" if cand == -1 else lib.candidate_name(cand)
        launched = launch_poisoned(lib, pr, cand, stream, f"{pr.label()} [{name}]", tally)
        if launched is None:
            continue
        out, ws = launched
        y = out.double().cpu().numpy()
        finite = bool(np.isfinite(y).all())
        err = float(np.linalg.norm(y - pr.ref)) / ref_norm if finite else float("inf")
        max_err = float(np.abs(y - pr.ref).max()) if finite else float("inf")
        ok = finite and err <= tol and max_err <= 4 * tol * ref_max
        tally.check(ok, f"{pr.label()} [{name}]", f"rel {err:.2e} max {max_err:.2e} (tol {tol:g}, finite {finite})")
        if pr.m > SMALL_M and cand != -1:
            check_workspace(pr, ws, f"{pr.label()} [{name}]", tally)


def w8a8_call(lib: K.Kernels, k: int, n: int, m: int, candidate: int = K.CANDIDATE_AUTO):
    """A W8A8 call on random per-channel INT8 weights (FP16): its params and the tensors they point into."""
    packed = torch.randint(-2**31, 2**31 - 1, ((n // 2) * (k // 2),), dtype=torch.int32, device="cuda")
    scales = (torch.rand(n, device="cuda") * 0.01 + 0.001).half()
    x = torch.randn(m, k, device="cuda").half()
    y = torch.empty(m, n, dtype=torch.float16, device="cuda")
    prm = K.make_params(m=m, n=n, k=k, bits=8, group_size=-1, x=x.data_ptr(), packed_weight=packed.data_ptr(),
                        scales=scales.data_ptr(), output=y.data_ptr(), act_mode=K.ActMode.W8A8_DYNAMIC)
    ws_bytes = lib.workspace_size(prm, candidate)
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    prm.workspace, prm.workspace_size = ws.data_ptr(), ws_bytes
    return prm, (packed, scales, x, y, ws)


def quantize_share(lib: K.Kernels, shapes: list[tuple[int, int]], ms=(1024, 2048, 4096)) -> None:
    """Device time of the quantize kernel within a W8A8 call (per-channel INT8 weights, FP16, the dispatch)."""
    from torch.profiler import ProfilerActivity, profile

    stream = torch.cuda.current_stream().cuda_stream
    for k, n in shapes:
        for m in ms:
            prm, _keep = w8a8_call(lib, k, n, m)
            for _ in range(3):
                lib.run(prm, stream=stream)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    lib.run(prm, stream=stream)
                torch.cuda.synchronize()
            times = {e.key: e.device_time_total for e in prof.key_averages()}
            quant = sum(t for name, t in times.items() if "quantize" in name) / 20
            total = sum(times.values()) / 20
            print(f"{k}x{n} m={m} [{lib.candidate_name(lib.dispatch(prm))}]: quantize {quant:.1f} us of "
                  f"{total:.1f} us device time ({100 * quant / total:.1f} %)", flush=True)


def timeline(lib: K.Kernels, cases: list[str], calls: int = 20) -> None:
    """Per case KxNxM[@CANDIDATE]: the quantize kernel's and the GEMM's device time and the gap between them (GEMM
    start - quantize end: negative where the programmatic launch overlaps them), medians over `calls` W8A8 calls,
    each after L2 was flushed (a 128 MB write), from the CUPTI kernel records (ns)."""
    from torch.profiler import ProfilerActivity, profile

    stream = torch.cuda.current_stream().cuda_stream
    flush = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    for case in cases:
        shape, _, name = case.partition("@")
        k, n, m = (int(v) for v in shape.split("x"))
        cand = lib.candidate_by_name(name) if name else K.CANDIDATE_AUTO
        prm, _keep = w8a8_call(lib, k, n, m, cand)
        for _ in range(3):
            lib.run(prm, stream=stream, candidate=cand)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                flush.zero_()
                lib.run(prm, stream=stream, candidate=cand)
            torch.cuda.synchronize()
        spans = sorted((e.start_ns(), e.start_ns() + e.duration_ns(), "quantize" in e.name())
                       for e in prof.profiler.kineto_results.events()
                       if "quantize" in e.name() or "gemm_s8" in e.name())
        quant = [s for s in spans if s[2]]
        gemm = [s for s in spans if not s[2]]
        if len(quant) != calls or len(gemm) != calls:
            print(f"{case}: {len(quant)} quantize and {len(gemm)} GEMM kernel records for {calls} calls", flush=True)
            continue
        med = lambda v: float(np.median(v)) / 1e3  # noqa: E731 (ns -> us)
        used = lib.candidate_name(cand if name else lib.dispatch(prm))
        print(f"timeline {k}x{n} m={m} [{used}]: quantize {med([q[1] - q[0] for q in quant]):.2f} us, gap "
              f"{med([g[0] - q[1] for q, g in zip(quant, gemm)]):+.2f} us, GEMM {med([g[1] - g[0] for g in gemm]):.2f}"
              f" us, quantize start to GEMM end {med([g[1] - q[0] for q, g in zip(quant, gemm)]):.2f} us", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--quantize-share", metavar="KxN,...", help="time the quantize kernel's share instead (above)")
    ap.add_argument("--quick", action="store_true", help="the reduced grid above")
    ap.add_argument("--only", metavar="NAME,...", help="these W8A8 candidates (and the dispatch) instead of all")
    ap.add_argument("--timeline", metavar="KxNxM[@NAME],...",
                    help="the quantize kernel's and the GEMM's device time and the gap between them instead (above)")
    args = ap.parse_args()
    if args.timeline:
        timeline(K.load(), args.timeline.split(","))
        return 0
    if args.quantize_share:
        quantize_share(K.load(), [tuple(int(v) for v in s.split("x")) for s in args.quantize_share.split(",")])
        return 0
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    print(f"seed {seed}", flush=True)
    rng = np.random.default_rng(seed)
    lib = K.load()
    w8a8 = [i for i, name in enumerate(lib.candidates()) if name.startswith("w8a8")]
    if args.only:
        only = args.only.split(",")
        unknown = sorted(set(only) - {lib.candidate_name(i) for i in w8a8})
        if unknown:
            print(f"--only: no W8A8 candidate named {', '.join(unknown)}", file=sys.stderr)
            return 2
        w8a8 = [i for i in w8a8 if lib.candidate_name(i) in only]
    candidates = [-1] + w8a8
    print("candidates:", ", ".join(lib.candidate_name(i) for i in w8a8), flush=True)
    tally = Tally()
    m_grid, groups = (1, 5, 16, 17, 33, 127, 130, 257), (-1, 32, 64, 128, 256)
    per_channel = (((4096, 516), (17, 127, 333, 1000), (-1,)), ((6144, 130), (17, 127), (-1,)),
                   ((17408, 70), (17, 33), (-1,)), ((512, 4610), (17, 127, 333, 1000), (-1,)),
                   ((2048, 4610), (1000,), (-1,)))
    if args.quick:
        shapes = (((1088, 130), (5, 33), (-1, 64)), ((4096, 258), (16, 17, 127, 333, 1000), (-1,))) + per_channel
    else:
        shapes = (((192, 70), m_grid, groups), ((384, 258), m_grid, groups), ((1088, 130), m_grid, groups),
                  ((1152, 70), m_grid, groups), ((4096, 258), m_grid + (333, 1000), groups)) + per_channel
    for (k, n), ms, gs in shapes:
        for group in gs:
            if group != -1 and k % group:
                continue
            for m in ms:
                for act in ("fp16", "bf16"):
                    for asym in (False, True):
                        bias = bool(rng.integers(0, 2))
                        run_case(lib, Problem(m, k, n, group, act, asym, bias, rng), candidates, tally)
    # every fused activation on every candidate: small-M path, odd M, per channel and grouped, both offsets modes
    for ep in EPILOGUES:
        for (k, n), group, asym in (((4096, 258), -1, False), ((1088, 130), 64, True))[:1 if args.quick else 2]:
            for m in (5, 127, 333):
                for act in ("fp16", "bf16"):
                    run_case(lib, Problem(m, k, n, group, act, asym, True, rng, ep), candidates, tally)
    # refusals: zero points are not served
    pr = Problem(33, 192, 70, -1, "fp16", False, False, rng)
    out = torch.empty(33, 70, dtype=torch.float16, device="cuda")
    prm = pr.params(out, zeros=pr.scales.data_ptr())
    for cand in w8a8:
        tally.check(lib.supports(cand, prm) == K.Status.UNSUPPORTED_OPTION,
                    f"zeros refused [{lib.candidate_name(cand)}]")
    print(f"{tally.passed} passed, {tally.failed} failed", flush=True)
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
