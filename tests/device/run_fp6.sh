#!/usr/bin/env bash
# FP6 E3M2 on a GPU in one device call: build the kernels (and their test library) for sm_90a, run
# tests/device/fp6_check.py (converters on every code in every position, the GEMV through the C ABI, refusals),
# gemm_check.py --bits 6 (every GEMM candidate on FP6), kernels_check.py --quick (the INT8 / INT4 GEMV that shares the
# FP6 kernel template), conv_check.py's epilogue sweep (every fused activation on every linear candidate, FP6
# included), the FP6 GPU pytest file, a short benchmark of FP6 per channel against INT8 per channel, INT4 g128,
# cuBLAS FP16 and (when its extension imports) FP6-LLM at M = 1 .. 1024, and FP6 on every candidate that serves it
# at M = 1 .. 16.
#   bash tests/device/run_fp6.sh [--no-bench]     logs and bench_fp6*.json go to $OUT (or ./fp6-out)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
[[ -f .device/prelude.sh ]] && source .device/prelude.sh
OUT=${OUT:-$root/fp6-out}
mkdir -p "$OUT"
export PYTHONPATH=$root/python:$root${PYTHONPATH:+:$PYTHONPATH}
bdir=/tmp/build-fp6
rc=0
t0=$SECONDS
{ cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    && cmake --build $bdir --target trt_woq_kernels trt_woq_kernels_testing -j16; } > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
export TRT_WOQ_KERNELS_PATH=$bdir/plugins/kernels/libtrt_woq_kernels.so
export TRT_WOQ_KERNELS_TESTING_PATH=$bdir/plugins/kernels/libtrt_woq_kernels_testing.so
export TRT_WOQ_GEMM_LIB=$TRT_WOQ_KERNELS_TESTING_PATH TRT_WOQ_KERNELS_LIB=$TRT_WOQ_KERNELS_PATH
for check in "tests/device/fp6_check.py" "tests/device/gemm_check.py --bits 6" "tests/device/kernels_check.py --quick" \
             "tests/device/conv_check.py --epilogues-only"; do
  t0=$SECONDS
  timeout 200 python3 $check > "$OUT/$(basename ${check%% *} .py).log" 2>&1
  r=$?
  grep -E "^FAIL" "$OUT/$(basename ${check%% *} .py).log" | head -10
  echo "$check: $(tail -1 "$OUT/$(basename ${check%% *} .py).log") (exit $r, $((SECONDS - t0)) s)"
  [[ $r -ne 0 ]] && rc=1
done
t0=$SECONDS
timeout 120 python3 -m pytest -q tests/plugins/kernels/test_fp6_gpu.py > "$OUT/pytest_fp6.log" 2>&1
r=$?
echo "pytest tests/plugins/kernels/test_fp6_gpu.py: $(tail -1 "$OUT/pytest_fp6.log") (exit $r, $((SECONDS - t0)) s)"
[[ $r -ne 0 ]] && rc=1
[[ ${1:-} == --no-bench ]] && exit $rc
t0=$SECONDS
peer=$(python3 -c "import torch, fp6_llm" 2>/dev/null && echo ,fp6_llm)
timeout 200 python3 -m trt_woq.bench --shapes 14336x4096,4096x28672,8192x57344 --m 1,16,64,128,333,1024 \
  --methods cublas_fp16,int8_pc,int4_g128,fp6_pc$peer --json "$OUT/bench_fp6.json" > "$OUT/bench.log" 2>&1 \
  || { echo "bench failed:"; tail -5 "$OUT/bench.log"; rc=1; }
timeout 150 python3 -m trt_woq.bench --shapes 14336x4096,4096x28672,8192x57344 --m 1,4,8,12,16 \
  --methods fp6_pc --candidates fp6 --json "$OUT/bench_fp6_candidates.json" > "$OUT/bench_candidates.log" 2>&1 \
  || { echo "candidate sweep failed:"; tail -5 "$OUT/bench_candidates.log"; rc=1; }
echo "bench: $((SECONDS - t0)) s"
python3 - "$OUT/bench_fp6.json" "$OUT/bench_fp6_candidates.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
t = {(r["k"], r["n"], r["m"], r["method"]): r.get("us") for r in rows}
meths = ("cublas_fp16", "int8_pc", "int4_g128", "fp6_pc", "fp6_llm")
print(f"{'K x N':>13} {'M':>4} " + " ".join(f"{m:>12}" for m in meths) + "  fp6 x cuBLAS  fp6 x FP6-LLM")
for (k, n, m) in sorted({key[:3] for key in t}):
    us = [t.get((k, n, m, x)) for x in meths]
    ratio = [f"{b / us[3]:.2f}" if b and us[3] else "-" for b in (us[0], us[4])]
    print(f"{k:>6}x{n:<6} {m:>4} " + " ".join(f"{u:>12.1f}" if u else f"{'-':>12}" for u in us)
          + f"  {ratio[0]:>12}  {ratio[1]:>13}")
rows = json.load(open(sys.argv[2]))["rows"]
print("FP6 per channel by candidate (us): dispatch, then the three fastest")
for key in sorted({(r["k"], r["n"], r["m"]) for r in rows}):
    rs = [r for r in rows if (r["k"], r["n"], r["m"]) == key and r.get("us")]
    auto = next((r["us"] for r in rs if r["method"] == "fp6_pc"), None)
    best = sorted((r["us"], r["method"].split("@")[1]) for r in rs if "@" in r["method"])[:3]
    print(f"{key[0]:>6}x{key[1]:<6} M={key[2]:<3} auto {auto}  " + "  ".join(f"{c} {u:.1f}" for u, c in best))
PY
exit $rc
