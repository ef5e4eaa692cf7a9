"""Device test of issue 18: the fused epilogues on every linear candidate and the conv2d candidate against float64.

Run on a GPU machine from the repository root after building the kernels (tests/device/run_conv.sh does both):

    TRT_WOQ_KERNELS_PATH=build/plugins/kernels/libtrt_woq_kernels.so PYTHONPATH=python:. \\
        python3 tests/device/conv_check.py [--seed S]

1. Epilogues: every epilogue (none, relu, clip, silu, gelu_erf, gelu_tanh) x INT4 g128 / INT8 / FP6 per channel x FP16 /
   BF16 x M in {1, 5, 16, 64, 200} on K = 1152, N = 520 (a partial tile), through the dispatch and every candidate
   that supports the problem. Reference: float64 epilogue(X @ W + bias) with the epilogue's float64 function from
   graph_passes/registry/epilogues.py, on pre-activations of unit size (the activations' curved part).
2. Conv2d, on the dispatch and on every conv candidate (conv_im2col, conv_implicit, conv_implicit_cl and its 4- and
   8-warp tactics, conv_wgmma*):
   1x1 / 3x3 / 7x7, odd heights and widths, asymmetric padding, stride 2, dilation 2 (and both), batch 1 to 8, partial
   channel and pixel tiles, pixel tiles across rows and images, output images of 8k, 4k, 2k and odd pixels (conv_wgmma's
   store widths), plus real layer shapes whose K is split (over a cluster; conv_wgmma: stream-K, its tactics included:
   token tiles, the wave-filling split, the scalar store); INT8 / INT4 per channel, INT4 g128 (g64), group 32,
   with and without zero points; FP16 and BF16; bias; every epilogue in turn; the weight in K order (c, i, j) with an
   NCHW activation, and in K order (i, j, c) with an NCHW and with an NHWC activation. Reference: torch float64
   conv2d of the dequantized weight (F.pad for the asymmetric pads), independent of the kernels' gathers.
Weights quantized and packed by graph_passes (each format's quantizer and packer); outputs poisoned with NaN before
each launch. Pass: normwise relative error below the activation type's tolerance and the largest error below 4x that
of max|Y|. Prints one line per failure and `N passed, N failed`; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

try:
    import torch
except ImportError:  # covered_combinations() is read on machines without torch
    torch = None

from graph_passes.registry.epilogues import EPILOGUES
from graph_passes.registry.formats import format_by_bits
from trt_woq import kernels as K
from trt_woq.bench_conv import conv_geometry

TOL = {"fp16": 2e-3, "bf16": 1.2e-2}
DTYPES = {}  # "fp16" / "bf16" -> torch dtype, filled by main()
LINEAR_FORMATS = {8: "int8", 4: "int4", 6: "fp6_e3m2"}  # kernels.h names; conv2d serves the first two
CLIP = {"clip_min": -0.5, "clip_max": 0.75}
ONLY: set[str] = set()  # --candidates: check only these by name (and the dispatch); empty: every candidate


def quantized(k, n, bits, group, act, rng, asymmetric=False):
    """(packed int32 cuda, scales cuda, zeros cuda or None, dequantized float64 W [K, N]) from the format's quantizer
    and packer."""
    fmt = format_by_bits(bits)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    qw = fmt.quantize(w, group, asymmetric, act)
    packed = torch.from_numpy(fmt.pack(qw.u)).cuda()
    scales = torch.from_numpy(np.asarray(qw.scales, np.float32)).to(DTYPES[act]).cuda()
    zeros = torch.from_numpy(np.asarray(qw.zeros, np.float32)).to(DTYPES[act]).cuda() if asymmetric else None
    w_ref = fmt.dequantize(packed.cpu().numpy(), scales.double().cpu().numpy(),
                           None if zeros is None else zeros.double().cpu().numpy(), k, n, group)
    return packed, scales, zeros, w_ref


def compare(y, ref, act):
    y = y.double().cpu().numpy()
    if not np.isfinite(y).all():
        return False, "non-finite output"
    err = np.abs(y - ref)
    rel = np.linalg.norm(err) / np.linalg.norm(ref)
    worst = err.max() / np.abs(ref).max()
    return rel < TOL[act] and worst < 4 * TOL[act], f"rel {rel:.2e} worst {worst:.2e}"


def launch(lib, params, out, candidate=K.CANDIDATE_AUTO):
    ws_bytes = lib.workspace_size(params, candidate)
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    params.workspace, params.workspace_size = (ws.data_ptr(), ws_bytes) if ws_bytes else (None, 0)
    out.fill_(float("nan"))
    lib.run(params, stream=torch.cuda.current_stream().cuda_stream, candidate=candidate)
    torch.cuda.synchronize()


def check_candidates(lib, tally, prm, y, ref, act, sm, label):
    """``prm`` through the dispatch and through every candidate that supports it, each output against ``ref``."""
    cands = [K.CANDIDATE_AUTO] + [c for c in range(lib.candidate_count()) if lib.supports(c, prm, sm) == K.Status.OK
                                  and (not ONLY or lib.candidate_name(c) in ONLY)]
    for c in cands:
        try:
            launch(lib, prm, y, c)
            ok, detail = compare(y, ref, act)
        except K.KernelError as e:
            ok, detail = False, str(e)
        tally.check(ok, f"{label} " + ("auto" if c < 0 else lib.candidate_name(c)), detail)


def test_epilogues(lib, tally, rng):
    k, n = 1152, 520
    sm = K.device_sm()
    for act in ("fp16", "bf16"):
        for bits, group in ((4, 128), (8, -1), (6, -1)):
            packed, scales, _, w_ref = quantized(k, n, bits, group, act, rng)
            bias = torch.from_numpy(rng.standard_normal(n) * 0.3).to(DTYPES[act]).cuda()
            for m in (1, 5, 16, 64, 200):
                x = torch.from_numpy(rng.standard_normal((m, k))).to(DTYPES[act]).cuda()
                pre = x.double().cpu().numpy() @ w_ref + bias.double().cpu().numpy()
                y = torch.empty(m, n, dtype=DTYPES[act], device="cuda")
                for ep in EPILOGUES:
                    params_kw = CLIP if ep.params else {}
                    ref = ep.reference(pre, **params_kw)
                    prm = K.make_params(m=m, n=n, k=k, bits=bits, group_size=group, act=act, x=x.data_ptr(),
                                        packed_weight=packed.data_ptr(), scales=scales.data_ptr(),
                                        bias=bias.data_ptr(), output=y.data_ptr(),
                                        epilogue=K.Epilogue[ep.name.upper()], **params_kw)
                    check_candidates(lib, tally, prm, y, ref, act, sm,
                                     f"linear {ep.name} {act} {LINEAR_FORMATS[bits]} g{group} M={m}")


def covered_combinations() -> set[tuple[str, str, str, str]]:
    """(weight format, activation mode, op, epilogue) names, as kernels.h's enums, that this check runs (read by
    tests/plugins/kernels/test_registry_walk.py without a GPU): every epilogue on the linear candidates, and on
    conv2d (the conv cases give every epilogue to INT8 and INT4)."""
    return ({(fmt, "weight_only", "linear", ep.name) for fmt in LINEAR_FORMATS.values() for ep in EPILOGUES}
            | {(fmt, "weight_only", "conv2d", ep.name) for fmt in ("int8", "int4") for ep in EPILOGUES})


CONVS = [  # (batch, ic, oc, kernel, (h, w), stride, pads (top, left, bottom, right), dilation)
    (3, 64, 36, 1, (7, 5), 1, (0, 0, 0, 0), 1),
    (2, 64, 20, 3, (9, 11), 1, (1, 1, 1, 1), 1),
    (1, 64, 16, 3, (13, 9), 2, (1, 0, 2, 1), 1),
    (2, 128, 24, 3, (11, 12), 1, (2, 2, 2, 2), 2),
    (2, 128, 32, 7, (15, 13), 2, (3, 3, 3, 3), 1),
    (1, 192, 68, 7, (9, 17), 1, (3, 2, 1, 3), 2),
    (2, 128, 64, 3, (17, 23), 2, (1, 1, 1, 1), 2),
    (3, 128, 132, 3, (16, 16), 2, (1, 1, 1, 1), 1),
    (3, 320, 132, 1, (5, 9), 2, (0, 0, 0, 0), 1),
    (1, 512, 512, 3, (7, 7), 1, (1, 1, 1, 1), 1),
    (8, 256, 256, 3, (14, 14), 1, (1, 1, 1, 1), 1),
    (1, 1024, 256, 3, (8, 8), 1, (1, 1, 1, 1), 1),
    (2, 640, 320, 3, (8, 8), 1, (1, 1, 1, 1), 1),
]
QUICK_CONVS = CONVS[:3] + CONVS[-2:-1]
# (bits, group (None: 128, or 64 where K % 128 != 0), asymmetric): per channel and grouped, symmetric and with zero
# points, and group 32 (two groups per 64-k chunk).
CONV_FORMATS = [(8, -1, False), (4, -1, False), (4, None, False), (4, None, True), (8, 32, True), (8, -1, True)]


def weight_views(w_ref, oc, ic, ks):
    """(K order, float64 ONNX weight [OC, IC, kh, kw]) of the packed matrix ``w_ref`` [K, N] read in each K order."""
    w = np.ascontiguousarray(w_ref.T)
    return [(K.ConvKOrder.CIJ, w.reshape(oc, ic, ks, ks)),
            (K.ConvKOrder.IJC, np.ascontiguousarray(w.reshape(oc, ks, ks, ic).transpose(0, 3, 1, 2)))]


def test_convs(lib, tally, rng, convs):
    """Every conv of CONVS x FP16 / BF16 x CONV_FORMATS on the dispatch and on every conv candidate that supports it;
    the epilogue cycles so that each (format, candidate) meets every epilogue over the shapes."""
    import torch.nn.functional as F

    eps = list(EPILOGUES)
    sm = K.device_sm()
    i = 0
    for batch, ic, oc, ks, (h, w), stride, pads, dil in convs:
        k = ic * ks * ks
        g = conv_geometry(batch, ic, h, w, ks, ks, (stride, stride), pads, (dil, dil))
        for act in ("fp16", "bf16"):
            x = torch.from_numpy(rng.standard_normal((batch, ic, h, w))).to(DTYPES[act]).cuda()
            bias = torch.from_numpy(rng.standard_normal(oc) * 0.3).to(DTYPES[act]).cuda()
            y = torch.empty(batch, oc, g.out_h, g.out_w, dtype=DTYPES[act], device="cuda")
            top, left, bottom, right = pads
            xpad = F.pad(x.double(), (left, right, top, bottom))
            i += 1
            for fi, (bits, group, asym) in enumerate(CONV_FORMATS):
                ep = eps[(i + fi) % len(eps)]  # shifted by one per (shape, type): every (format, epilogue) pair
                group = group if group is not None else (128 if k % 128 == 0 else 64)
                params_kw = CLIP if ep.params else {}
                packed, scales, zeros, w_ref = quantized(k, oc, bits, group, act, rng, asym)
                for order, w4 in weight_views(w_ref, oc, ic, ks):
                    pre = F.conv2d(xpad, torch.from_numpy(w4).cuda(), bias.double(), stride=stride, dilation=dil)
                    ref = ep.reference(pre.cpu().numpy(), **params_kw)
                    for nhwc in (False, True) if order == K.ConvKOrder.IJC else (False,):
                        gv = conv_geometry(batch, ic, h, w, ks, ks, (stride, stride), pads, (dil, dil), order, nhwc)
                        xv = x.permute(0, 2, 3, 1).contiguous() if nhwc else x
                        prm = K.make_params(m=batch * g.out_h * g.out_w, n=oc, k=k, bits=bits, group_size=group,
                                            act=act, x=xv.data_ptr(), packed_weight=packed.data_ptr(),
                                            scales=scales.data_ptr(), zeros=None if zeros is None else zeros.data_ptr(),
                                            bias=bias.data_ptr(), output=y.data_ptr(), op=K.Op.CONV2D, conv=gv,
                                            epilogue=K.Epilogue[ep.name.upper()], **params_kw)
                        check_candidates(lib, tally, prm, y, ref, act, sm,
                                         f"conv b{batch} {ic}->{oc} {ks}x{ks} {h}x{w} s{stride} p{list(pads)} d{dil} "
                                         f"{act} int{bits} g{group}{' zp' if asym else ''} {ep.name} "
                                         f"{order.name.lower()}{' nhwc' if nhwc else ''}")
    # Refusals: a conv the layout cannot take (K = 27) and inconsistent geometry.
    g = conv_geometry(1, 3, 9, 9, 3, 3, pads=(1, 1, 1, 1))
    prm = K.make_params(m=81, n=32, k=27, bits=8, group_size=-1, op=K.Op.CONV2D, conv=g)
    tally.check(lib.dispatch(prm) == -1, "conv K = 27 refused")
    g.out_h += 1
    prm = K.make_params(m=81, n=32, k=576, bits=8, group_size=-1, op=K.Op.CONV2D, conv=g)
    tally.check(lib.dispatch(prm) == -1, "conv with a wrong out_h refused")


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--convs-only", action="store_true", help="skip the epilogue sweep (e.g. under compute-sanitizer)")
    p.add_argument("--epilogues-only", action="store_true", help="skip the conv2d cases")
    p.add_argument("--candidates", metavar="NAME,...", help="only these candidates (and the dispatch)")
    p.add_argument("--quick", action="store_true", help="conv2d: the small shapes and one split shape only (for "
                   "compute-sanitizer)")
    args = p.parse_args(argv)
    from kernels_check import Tally  # beside this file (tests/device is the script's folder)

    DTYPES.update(fp16=torch.float16, bf16=torch.bfloat16)
    ONLY.update(args.candidates.split(",") if args.candidates else ())
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    lib = K.load()
    tally = Tally()
    t0 = time.time()
    if not args.convs_only:
        test_epilogues(lib, tally, rng)
    print(f"epilogues: {tally.passed} passed, {tally.failed} failed ({time.time() - t0:.0f} s)", flush=True)
    t0 = time.time()
    before = (tally.passed, tally.failed)
    if not args.epilogues_only:
        test_convs(lib, tally, rng, QUICK_CONVS if args.quick else CONVS)
    print(f"convs: {tally.passed - before[0]} passed, {tally.failed - before[1]} failed ({time.time() - t0:.0f} s)")
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
