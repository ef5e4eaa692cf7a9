"""Nsight Compute figures of the conv paths next to cuDNN (issue 18): per-kernel time, throughputs, global load
requests and the top stall reasons of every kernel that each method launches, for some rows of bench_conv's CONVS.

    TRT_WOQ_KERNELS_PATH=.../libtrt_woq_kernels.so PYTHONPATH=python:. python3 tests/device/conv_ncu.py [ROWS] [OUT] \
        [VARIANTS]

ROWS: comma-separated indices into trt_woq.bench_conv.CONVS (default 0,7,11: 1x1280 8x8, 1x512 7x7, 8x256 56x56);
VARIANTS: comma-separated columns of trt_woq.bench_conv.VARIANTS (default all).
Runs ``python -m trt_woq.bench_conv --profile`` under ncu (clocks unlocked, caches flushed before each kernel: the
weights come from DRAM) and prints one line per kernel under its method's label.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import tempfile

STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "lg_throttle", "mio_throttle", "math_pipe_throttle",
          "wait", "not_selected", "dispatch_stall", "membar", "sleeping", "no_instruction", "tex_throttle")
COLUMNS = {  # short name -> metric
    "us": "gpu__time_duration.sum",
    "ctas": "launch__grid_size",
    "sm%": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram%": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1%": "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2%": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "occ%": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "ld_req": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "tensor_inst": "sm__inst_executed_pipe_tensor.sum",
    "cyc/inst": "smsp__average_warp_latency_per_inst_issued.ratio",
}
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rows = argv[0] if argv else "0,7,11"
    out = argv[1] if len(argv) > 1 else tempfile.mkdtemp()
    labels_file, log = os.path.join(out, "ncu_labels.json"), os.path.join(out, "ncu.csv")
    metrics = list(COLUMNS.values()) + [STALL_METRIC.format(s) for s in STALLS]
    cmd = ["ncu", "--profile-from-start", "off", "--clock-control", "none", "--csv", "--log-file", log, "--metrics",
           ",".join(metrics), sys.executable, "-m", "trt_woq.bench_conv", "--profile", labels_file,
           "--conv-rows", rows] + (["--variants", argv[2]] if len(argv) > 2 else [])
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(labels_file):
        print(done.stdout[-3000:], done.stderr[-3000:])
        return 1
    labels = json.load(open(labels_file))
    text = "".join(line for line in open(log) if line.startswith('"'))
    kernels = {}  # ID -> (name, {metric: value})
    for r in csv.DictReader(io.StringIO(text)):
        name, values = kernels.setdefault(r["ID"], (r["Kernel Name"], {}))
        values[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    label = -1
    print(f"{'kernel':<44}" + "".join(f"{c:>12}" for c in COLUMNS) + "  top stalls (cycles per issue)")
    for _, (name, values) in sorted(kernels.items(), key=lambda kv: int(kv[0])):
        if "spin_kernel" in name:  # the marker before each method (torch.cuda._sleep)
            label += 1
            print(f"-- {labels[label] if 0 <= label < len(labels) else '?'}")
            continue
        f = {c: float(values.get(m, "nan") or "nan") for c, m in COLUMNS.items()}
        f["us"] /= 1e3  # ns
        stalls = sorted(((float(values.get(STALL_METRIC.format(s), 0) or 0), s) for s in STALLS), reverse=True)[:3]
        print(f"{name[:43]:<44}" + "".join(f"{v:12.4g}" for v in f.values()) + "  "
              + ", ".join(f"{s} {v:.1f}" for v, s in stalls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
