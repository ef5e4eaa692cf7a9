"""Conv2d benchmark: our WeightOnlyConv kernels (INT8 per channel, INT4 g128; each conv candidate by id,
and which one the dispatch picks) against cuDNN FP16 through ``torch.nn.functional.conv2d`` in NCHW and
channels-last, all timed in the same run, next to the weight floor; and the fused activation against none and
against a separate ``silu``, on convs and on linear layers.

    python -m trt_woq.bench_conv [--json FILE]

Method (as ``trt_woq.bench``): CUDA graphs of many calls, each call on its own copy of the weights so that the
copies together exceed 2.5x L2 (the weights stream from DRAM as in a real network), replays of the methods taken in
turn (same clocks); medians. Weight floor = bytes of one weight copy / the measured device copy bandwidth.
Inputs and weights are random: timing does not depend on the values.
"""

from __future__ import annotations

import argparse
import json
import sys

from trt_woq import kernels as K
from trt_woq.bench import cli_error, copies_for, copy_bandwidth, output_problem, time_interleaved, write_whole

# (batch, in channels, out channels, kernel, height = width): the table of issue 18 and the batch-8 rows.
CONVS = [(1, 1280, 1280, 3, 8), (2, 1280, 1280, 3, 8), (8, 1280, 1280, 3, 8), (1, 1280, 1280, 3, 16),
         (8, 1280, 1280, 3, 16), (1, 640, 640, 3, 32), (8, 640, 640, 3, 32), (1, 512, 512, 3, 7), (8, 512, 512, 3, 7),
         (1, 256, 256, 3, 14), (8, 256, 256, 3, 14), (8, 256, 256, 3, 56), (1, 1024, 256, 1, 14),
         (8, 1024, 256, 1, 14)]
# (M, K, N) linear rows for the fused-activation cost (an LLM MLP's up projection).
LINEARS = [(1, 4096, 14336), (16, 4096, 14336), (64, 4096, 14336)]
OURS = {"int8_pc": (8, -1), "int4_g128": (4, 128)}
# Each timed by id: column -> (candidate, weight K order, NHWC activation). The dispatch's pick for K order (i, j, c)
# and an NCHW activation (what the graph pass writes and the plugin passes) is reported and used in the ratios.
# "gemm" (candidate None): the linear dispatch on the conv's implicit-GEMM shape [M = pixels, K = C kh kw] x [K, N]
# with a ready [M, K] activation: what our linear kernels do with that shape, without the patches or the transpose.
VARIANTS = {"implicit": ("conv_implicit", K.ConvKOrder.CIJ, False),
            "im2col": ("conv_im2col", K.ConvKOrder.CIJ, False),
            "cl": ("conv_implicit_cl", K.ConvKOrder.IJC, False),
            "cl_nhwc": ("conv_implicit_cl", K.ConvKOrder.IJC, True),
            "cl_w4": ("conv_implicit_cl_w4", K.ConvKOrder.IJC, False),
            "cl_w8": ("conv_implicit_cl_w8", K.ConvKOrder.IJC, False),
            "wgmma": ("conv_wgmma", K.ConvKOrder.IJC, False),
            "wgmma_nhwc": ("conv_wgmma", K.ConvKOrder.IJC, True),
            "wg64": ("conv_wgmma_t64", K.ConvKOrder.IJC, False),
            "wg128": ("conv_wgmma_t128", K.ConvKOrder.IJC, False),
            "wg256": ("conv_wgmma_t256", K.ConvKOrder.IJC, False),
            "wgmma_quads": ("conv_wgmma_quads", K.ConvKOrder.IJC, False),
            "wgmma_scalar": ("conv_wgmma_scalar", K.ConvKOrder.IJC, False),
            "wgmodel": ("conv_wgmma_model", K.ConvKOrder.IJC, False),
            "wgfill": ("conv_wgmma_fill", K.ConvKOrder.IJC, False),
            "gemm": (None, K.ConvKOrder.IJC, False)}
# Columns also timed INT4 + fused SiLU by id (the fused activation's cost on each store; the dispatch's pick always).
SILU_VARIANTS = ("wgmodel", "wgmma_quads", "wgmma_scalar")


def conv_geometry(batch, cin, h, w, kh, kw, stride=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                  k_order=K.ConvKOrder.CIJ, activation_nhwc=False) -> K.ConvGeometry:
    """The C geometry of a conv; pads = (top, left, bottom, right)."""
    top, left, bottom, right = pads
    oh = (h + top + bottom - dilations[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + left + right - dilations[1] * (kw - 1) - 1) // stride[1] + 1
    return K.ConvGeometry(batch=batch, in_channels=cin, in_h=h, in_w=w, kernel_h=kh, kernel_w=kw, stride_h=stride[0],
                          stride_w=stride[1], pad_top=top, pad_left=left, pad_bottom=bottom, pad_right=right,
                          dilation_h=dilations[0], dilation_w=dilations[1], out_h=oh, out_w=ow, k_order=int(k_order),
                          activation_nhwc=int(activation_nhwc))


def _torch():
    import torch

    return torch


def _sizes(k, n, bits, group):
    """(int32 words of the packed weight, scale elements) of one [K, N] INT weight."""
    return (n // (4 if bits == 4 else 2)) * (k // 2), (k // (k if group == -1 else group)) * n


def _weights(k, n, bits, group, copies):
    """``copies`` random packed weights and fp16 scales of one [K, N] INT weight."""
    torch = _torch()
    words, scale_elems = _sizes(k, n, bits, group)
    packed = [torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device="cuda") for _ in range(copies)]
    scales = [(torch.rand(scale_elems, device="cuda") * 0.01 + 0.001).half() for _ in range(copies)]
    return list(zip(packed, scales))


def ours_calls(lib, m, k, n, bits, group, l2, x, y, bias, epilogue=K.Epilogue.NONE, op=K.Op.LINEAR, conv=None,
               after=None, candidate=K.CANDIDATE_AUTO):
    """One call per weight copy of our kernel (the dispatch's pick, or ``candidate``) writing ``y``; ``after(y)`` runs
    behind each call."""
    torch = _torch()
    words, scale_elems = _sizes(k, n, bits, group)
    wbytes = words * 4 + scale_elems * 2
    weights = _weights(k, n, bits, group, copies_for(wbytes, l2))
    params = [K.make_params(m=m, n=n, k=k, bits=bits, group_size=group, act="fp16", x=x.data_ptr(),
                            packed_weight=p.data_ptr(), scales=s.data_ptr(), bias=bias.data_ptr(), output=y.data_ptr(),
                            epilogue=epilogue, op=op, conv=conv) for p, s in weights]
    ws_bytes = lib.workspace_size(params[0], candidate)
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
    for prm in params:
        prm.workspace, prm.workspace_size = (ws.data_ptr(), ws_bytes) if ws_bytes else (None, 0)

    keep = (weights, ws, x, y, bias)

    def call(prm):
        def run():
            keep  # noqa: B018 - the buffers live as long as the calls (else the graphs read freed memory)
            lib.run(prm, stream=torch.cuda.current_stream().cuda_stream, candidate=candidate)
            if after is not None:
                after(y)
        return run

    return [call(p) for p in params], wbytes


def variant_calls(lib, ids, v, m, k, n, bits, group, l2, geo, x, x_nhwc, y, bias):
    """The calls of column ``v`` of VARIANTS (one per weight copy) and the bytes of one copy."""
    cand, _, nhwc = VARIANTS[v]
    if cand is None:
        torch = _torch()
        return ours_calls(lib, m, k, n, bits, group, l2, torch.randn(m, k, device="cuda").half(),
                          torch.empty(m, n, device="cuda").half(), bias)
    return ours_calls(lib, m, k, n, bits, group, l2, x_nhwc if nhwc else x, y, bias, op=K.Op.CONV2D, conv=geo[v],
                      candidate=ids[cand])


def cudnn_calls(batch, cin, cout, ks, hw, l2, channels_last):
    torch = _torch()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    wbytes = cout * cin * ks * ks * 2
    ws = [(torch.randn(cout, cin, ks, ks, device="cuda") * 0.01).half().to(memory_format=fmt)
          for _ in range(copies_for(wbytes, l2))]
    b = torch.randn(cout, device="cuda").half()
    x = torch.randn(batch, cin, hw, hw, device="cuda").half().to(memory_format=fmt)
    return [(lambda w=w: torch.nn.functional.conv2d(x, w, b, padding=ks // 2)) for w in ws], wbytes


def _row_operands(batch, cin, cout, ks, hw):
    """A CONVS row's geometry per VARIANTS column, M, K, random NCHW input (and its NHWC copy), output and bias."""
    torch = _torch()
    geo = {v: conv_geometry(batch, cin, hw, hw, ks, ks, pads=(ks // 2,) * 4, k_order=order, activation_nhwc=nhwc)
           for v, (_, order, nhwc) in VARIANTS.items()}
    g = geo["cl"]
    x = torch.randn(batch, cin, hw, hw, device="cuda").half()
    y = torch.empty(batch, cout, g.out_h, g.out_w, device="cuda").half()
    return (geo, batch * g.out_h * g.out_w, cin * ks * ks, x, x.permute(0, 2, 3, 1).contiguous(), y,
            torch.randn(cout, device="cuda").half())


def run(log=print, conv_rows=None, linears=True, variants=None) -> dict:
    """The conv rows (indices into CONVS, default all) with the VARIANTS columns named in ``variants`` (default all),
    and the linear rows; a dict of every figure."""
    torch = _torch()
    cols = {v: VARIANTS[v] for v in (variants or VARIANTS)}
    silu_cols = [v for v in SILU_VARIANTS if v in cols]
    torch.backends.cudnn.benchmark = True
    lib = K.load()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    bw = copy_bandwidth()
    log(f"device {torch.cuda.get_device_name(0)}, copy bandwidth {bw:.0f} GB/s, cuDNN {torch.backends.cudnn.version()}")
    silu = torch.nn.functional.silu
    rows = []
    ids = {lib.candidate_name(i): i for i in range(lib.candidate_count())}
    header = (f"{'conv (b, in->out, k, hw)':<28}| {'cuDNN NCHW':>10} {'cuDNN CL':>9} | "
              + " ".join(f"{f'{fmt} {v}':>12}" for fmt in ("int8", "int4") for v in cols)
              + f" | {'int4+silu':>9} {'int4,silu':>9} "
              + "".join(f"{f'{v}+silu':>17} " for v in silu_cols)
              + f"| {'floor f16/i8/i4':>17} | {'i8 x CL':>7} {'i4 x CL':>7}"
              + " | dispatch")
    log(header)
    for batch, cin, cout, ks, hw in (CONVS if conv_rows is None else [CONVS[i] for i in conv_rows]):
        geo, m, k, x, x_nhwc, y, bias = _row_operands(batch, cin, cout, ks, hw)
        g = geo["cl"]
        methods, wbytes, picks = {}, {}, {}
        methods["cudnn_nchw"], wbytes["fp16"] = cudnn_calls(batch, cin, cout, ks, hw, l2, False)
        methods["cudnn_cl"], _ = cudnn_calls(batch, cin, cout, ks, hw, l2, True)
        for name, (bits, group) in OURS.items():
            prm = K.make_params(m=m, n=cout, k=k, bits=bits, group_size=group, op=K.Op.CONV2D, conv=g)
            picks[name] = lib.candidate_name(lib.dispatch(prm))
            for v in cols:
                methods[f"{name}_{v}"], wbytes[name] = variant_calls(lib, ids, v, m, k, cout, bits, group, l2, geo,
                                                                     x, x_nhwc, y, bias)
        methods["int4_g128_silu"], _ = ours_calls(lib, m, k, cout, 4, 128, l2, x, y, bias, K.Epilogue.SILU,
                                                  K.Op.CONV2D, g)
        methods["int4_g128_then_silu"], _ = ours_calls(lib, m, k, cout, 4, 128, l2, x, y, bias, op=K.Op.CONV2D,
                                                       conv=g, after=lambda t: silu(t, inplace=True))
        for v in silu_cols:
            methods[f"int4_g128_{v}_silu"], _ = ours_calls(lib, m, k, cout, 4, 128, l2, x, y, bias, K.Epilogue.SILU,
                                                           K.Op.CONV2D, geo[v], candidate=ids[cols[v][0]])
        times = dict(zip(methods, time_interleaved(list(methods.values()))))
        t = {k_: (v if not isinstance(v, Exception) else None) for k_, v in times.items()}
        for name in OURS:  # the dispatch's pick, from the same replays (None when its column is not timed)
            col = next((v for v, c in cols.items() if c[0] == picks[name] and not c[2]), None)
            t[name] = t[f"{name}_{col}"] if col else None
        floors = {name: b / bw / 1e3 for name, b in (("fp16", wbytes["fp16"]), ("int8", wbytes["int8_pc"]),
                                                        ("int4", wbytes["int4_g128"]))}
        row = {"batch": batch, "in": cin, "out": cout, "kernel": ks, "hw": hw, "us": t, "floor_us": floors,
               "dispatch": picks, "errors": {k_: str(v) for k_, v in times.items() if isinstance(v, Exception)}}
        rows.append(row)
        fmt = lambda v: f"{v:7.1f}" if v else "    n/a"  # noqa: E731
        ratio = lambda ours: f"{t['cudnn_cl'] / t[ours]:6.2f}x" if t["cudnn_cl"] and t[ours] else "    n/a"  # noqa
        best = min(v for v in (t["cudnn_nchw"], t["cudnn_cl"]) if v) if (t["cudnn_nchw"] or t["cudnn_cl"]) else None
        log(f"{batch}, {cin}->{cout}, {ks}x{ks}, {hw}x{hw}".ljust(28) + f"| {fmt(t['cudnn_nchw']):>10} "
            f"{fmt(t['cudnn_cl']):>9} | "
            + " ".join(f"{fmt(t[f'{n}_{v}']):>12}" for n in OURS for v in cols)
            + f" | {fmt(t['int4_g128_silu']):>9} {fmt(t['int4_g128_then_silu']):>9} "
            + "".join(f"{fmt(t[f'int4_g128_{v}_silu']):>17} " for v in silu_cols) + "| "
            f"{floors['fp16']:5.1f}/{floors['int8']:4.1f}/{floors['int4']:4.1f}     | {ratio('int8_pc')} "
            f"{ratio('int4_g128')} | {picks['int8_pc'][5:]}/{picks['int4_g128'][5:]}")
        row["best_cudnn_us"] = best
        if row["errors"]:
            log(f"  errors: {row['errors']}")
    lin_rows = []
    if not linears:
        return {"device": torch.cuda.get_device_name(0), "copy_gbps": bw, "convs": rows, "linears": lin_rows}
    log(f"\n{'linear (M, K, N)':<28}| {'int4':>7} {'int4+silu':>9} {'int4,silu':>9} {'gelu':>7} | fused cost")
    for m, k, n in LINEARS:
        x = torch.randn(m, k, device="cuda").half()
        y = torch.empty(m, n, device="cuda").half()
        bias = torch.randn(n, device="cuda").half()
        methods = {"none": ours_calls(lib, m, k, n, 4, 128, l2, x, y, bias)[0],
                   "silu": ours_calls(lib, m, k, n, 4, 128, l2, x, y, bias, K.Epilogue.SILU)[0],
                   "then_silu": ours_calls(lib, m, k, n, 4, 128, l2, x, y, bias,
                                           after=lambda t: silu(t, inplace=True))[0],
                   "gelu_erf": ours_calls(lib, m, k, n, 4, 128, l2, x, y, bias, K.Epilogue.GELU_ERF)[0]}
        t = dict(zip(methods, time_interleaved(list(methods.values()))))
        t = {k_: (v if not isinstance(v, Exception) else None) for k_, v in t.items()}
        lin_rows.append({"m": m, "k": k, "n": n, "us": t})
        cost = f"{100 * (t['silu'] / t['none'] - 1):+.1f} %" if t["silu"] and t["none"] else "n/a"
        log(f"{m}, {k}, {n}".ljust(28) + f"| {t['none']:7.1f} {t['silu']:9.1f} {t['then_silu']:9.1f} "
            f"{t['gelu_erf']:7.1f} | {cost}")
    return {"device": torch.cuda.get_device_name(0), "copy_gbps": bw, "convs": rows, "linears": lin_rows}


def profile(conv_rows, labels_file, variants=None) -> None:
    """For a profiler (tests/device/conv_ncu.py): each conv row's cuDNN FP16 (NCHW, channels-last) and INT4 g128 of
    the VARIANTS columns named in ``variants`` (default all), each launched once after a marker kernel (``torch.cuda._sleep``), between
    cudaProfilerStart / Stop; the labels in launch order go to ``labels_file`` as JSON."""
    torch = _torch()
    torch.backends.cudnn.benchmark = True
    lib = K.load()
    ids = {lib.candidate_name(i): i for i in range(lib.candidate_count())}
    launches = []
    for batch, cin, cout, ks, hw in (CONVS[i] for i in conv_rows):
        row = f"{batch}x{cin}->{cout} {ks}x{ks} {hw}x{hw}"
        geo, m, k, x, x_nhwc, y, bias = _row_operands(batch, cin, cout, ks, hw)
        for layout in ("nchw", "cl"):
            calls, _ = cudnn_calls(batch, cin, cout, ks, hw, 0, layout == "cl")
            calls[0]()  # cuDNN's algorithm search, outside the profiled range
            launches.append((f"{row} cudnn_{layout}", calls[0]))
        for v in variants or VARIANTS:
            calls, _ = variant_calls(lib, ids, v, m, k, cout, 4, 128, 0, geo, x, x_nhwc, y, bias)
            launches.append((f"{row} int4_{v}", calls[0]))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for label, call in launches:
        torch.cuda._sleep(1)  # the marker kernel (ATen's spin_kernel)
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    write_whole(labels_file, json.dumps([label for label, _ in launches]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m trt_woq.bench_conv", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--conv-rows", metavar="I,J,...", help="only these rows of CONVS (0-based)")
    p.add_argument("--no-linears", action="store_true", help="leave out the linear rows")
    p.add_argument("--variants", metavar="V,W,...", help=f"only these columns of ours (of {','.join(VARIANTS)})")
    p.add_argument("--profile", metavar="LABELS.json", help="launch each method of --conv-rows once for a profiler "
                   "(tests/device/conv_ncu.py) instead of timing; write the launch labels here")
    args = p.parse_args(argv)
    rows = None if not args.conv_rows else [int(i) for i in args.conv_rows.split(",")]
    variants = None if not args.variants else args.variants.split(",")
    if variants and not set(variants) <= set(VARIANTS):
        return cli_error(p.prog, f"--variants: unknown column in {args.variants} (known: {', '.join(VARIANTS)})")
    for option, path in (("--json", args.json), ("--profile", args.profile)):
        if path and output_problem(path):
            return cli_error(p.prog, f"{option} {output_problem(path)}")
    try:
        _torch()
    except ImportError:
        return cli_error(p.prog, "the benchmark needs torch with CUDA")
    if args.profile:
        profile(rows if rows is not None else range(len(CONVS)), args.profile, variants)
        return 0
    result = run(conv_rows=rows, linears=not args.no_linears, variants=variants)
    if args.json:
        write_whole(args.json, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
