#!/usr/bin/env bash
# One device call for the GEMM: build the kernels library and its test library (CMake, $BUILD, default
# /tmp/build-gemm; the GEMM's C entries trt_woq_gemm_* are in the test library), then run the steps in the order
# given: numerics test (check; quick: its --quick form), compute-sanitizer memcheck / racecheck on small odd problems (sanitize), the candidate
# sweep behind the dispatch rule (sweep, options in SWEEP_ARGS), the GEMM benchmark (bench), the package's
# benchmark through the public dispatch (trtbench), both benchmarks back to back at M = 64 (m64), SASS counts (sass),
# ncu (ncu: M = 4096, 64 and 333, and the SASS stall sampling at M = 333). GPU clocks, power and throttle reasons
# are sampled every 0.5 s into $OUT/smi.csv (step start times are in the output, to line them up). Logs go to $OUT
# (or ./gemm_out).
# Usage: bash tests/device/run_gemm.sh [check|quick|sanitize|sweep|bench|trtbench|m64|sass|ncu|all]...
#   BENCH_ARGS: options of bench_gemm.py; TRT_BENCH_ARGS: options of python -m trt_woq.bench (default: the three
#   standard shapes, every M, INT4 g128 and cuBLAS FP16).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gemm_out}; mkdir -p "$OUT"
BUILD=${BUILD:-/tmp/build-gemm}
STEPS=${*:-all}
[[ " $STEPS " == *" all "* ]] && STEPS="check sanitize bench sass ncu"
ARCH=${GEMM_ARCH:--gencode arch=compute_90a,code=sm_90a}
SHAPES3=4096x28672,14336x4096,8192x57344
TRT_BENCH_ARGS=${TRT_BENCH_ARGS:---m 1,4,16,64,256,1024,4096 --shapes $SHAPES3 --methods int4_g128,cublas_fp16}
status=0
t0=$(date +%s)
stamp() { echo "== $(date -u +%H:%M:%S) (+$(( $(date +%s) - t0 ))s) $*"; }
smi_pid=
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 500 > "$OUT/smi.csv" 2>&1 &
  smi_pid=$!
fi
{ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    "-DCMAKE_CUDA_FLAGS=--split-compile=0 -Xptxas -v" &&
  cmake --build "$BUILD" --target trt_woq_kernels trt_woq_kernels_testing -j16; } > "$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
grep -E "spill" "$OUT/build.log" | sort | uniq -c
stamp "libraries built"
export TRT_WOQ_GEMM_LIB=$BUILD/plugins/kernels/libtrt_woq_kernels_testing.so
export TRT_WOQ_KERNELS_LIB=$BUILD/plugins/kernels/libtrt_woq_kernels.so
trt_bench() {  # trt_bench LOG ARGS...: python -m trt_woq.bench through the public ABI
  local log=$1; shift
  TRT_WOQ_KERNELS_PATH=$TRT_WOQ_KERNELS_LIB PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH} \
    python3 -m trt_woq.bench "$@" --json "$OUT/$log.json" 2>&1 | tee "$OUT/$log.log" | tail -40 || status=1
}
m64_runs=0
for step in $STEPS; do
  stamp "$step"
  case $step in
    check)
      python3 tests/device/gemm_check.py 2>&1 | tee "$OUT/check.log" | grep -v "^FAIL" ; [[ ${PIPESTATUS[0]} == 0 ]] || status=1
      grep "^FAIL" "$OUT/check.log" | head -30 ;;
    quick)
      python3 tests/device/gemm_check.py --quick 2>&1 | tee "$OUT/quick.log" | grep -v "^FAIL" ; [[ ${PIPESTATUS[0]} == 0 ]] || status=1
      grep "^FAIL" "$OUT/quick.log" | head -30 ;;
    sweep)
      python3 tests/device/sweep_gemm.py --json "$OUT/sweep_gemm.json" ${SWEEP_ARGS:-} > "$OUT/sweep.log" 2>&1 || status=1
      sed -n '/^bits/,$p' "$OUT/sweep.log" ;;
    sanitize)
      GEMM_ARCH=$ARCH bash tests/device/sanitize_gemm.sh "$TRT_WOQ_GEMM_LIB" "$OUT" || status=1 ;;
    bench)
      python3 tests/device/bench_gemm.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" || status=1 ;;
    trtbench)
      [[ -n "${TRT_WOQ_KERNELS_LIB:-}" ]] && trt_bench trt_woq_bench $TRT_BENCH_ARGS ;;
    m64)  # M = 64 through both benchmarks, back to back, to compare their figures
      m64_runs=$((m64_runs + 1))
      [[ -n "${TRT_WOQ_KERNELS_LIB:-}" ]] &&
        trt_bench "m64_trt_$m64_runs" --m 64 --shapes $SHAPES3 --methods int4_g128,cublas_fp16
      python3 tests/device/bench_gemm.py --ms 64 --cands 'gemm_wgmma_64x128x64_s6*,gemm_wgmma_ws_64x128x64_s8_c2*' 2>&1 |
        tee "$OUT/m64_gemm_$m64_runs.log" | grep -v "all:" ;;
    sass)  # instruction mix per kernel: HMMA (mma.sync) or HGMMA (wgmma) vs everything else
      cuobjdump -sass "$TRT_WOQ_GEMM_LIB" > "$OUT/sass.txt" 2>&1
      awk '/Function :/{f=$3} /\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]\*\//{n[f]++} /HMMA/{h[f]++} /HGMMA/{g[f]++} /LDSM/{l[f]++}
           END{for (k in n) printf "%6d instr %5d HMMA %5d HGMMA %5d LDSM  %s\n", n[k], h[k], g[k], l[k], k}' "$OUT/sass.txt" | sort -k9 ;;
    ncu)
      # The compute-bound case of the largest shape through the warp-specialized 256x128 tile, and the M=64 case.
      ncu --clock-control none --kernel-name 'regex:gemm_.*mma(_ws)?_kernel' --launch-count 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
        python3 tests/device/bench_gemm.py --one 4096,8192,57344,${NCU_BIG_CAND:-gemm_wgmma_ws_256x128x64_s5} \
        > "$OUT/ncu_m4096.log" 2>&1 || status=1
      ncu --clock-control none --kernel-name 'regex:gemm_.*mma(_ws)?_kernel' --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section MemoryWorkloadAnalysis \
        python3 tests/device/bench_gemm.py --one 64,4096,28672,${NCU_M64_CAND:-gemm_wgmma_64x128x64_s6} \
        > "$OUT/ncu_m64.log" 2>&1 || status=1
      # M = 333 (the mid-M regime), INT4 g128 and FP6 per channel: the 176-token balanced tile (stream-K on
      # 14336 x 4096, tail split on 4096 x 4096) and its clustered form, then the SASS stall sampling of the first.
      for spec in "4 333,14336,4096,gemm_wgmma_ws_176x128x64_s6_streamk" \
                  "4 333,4096,4096,gemm_wgmma_ws_176x128x64_s6_tailsplit" \
                  "4 333,14336,4096,gemm_wgmma_ws_176x128x64_s6_c2_streamk" \
                  "6 333,14336,4096,gemm_wgmma_ws_176x128x64_s6_streamk"; do
        set -- $spec
        ncu --clock-control none --kernel-name regex:gemm_wgmma_ws_kernel --launch-count 1 --section SpeedOfLight \
          --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
          --print-details all python3 tests/device/bench_gemm.py --bits $1 --one $2 --eager \
          > "$OUT/ncu_m333_$1_$(echo "$2" | cut -d, -f2-3 | tr , _)_${2##*_}.log" 2>&1 || status=1
      done
      ncu --clock-control none --kernel-name regex:gemm_wgmma_ws_kernel --launch-count 1 --section WarpStateStats \
        --section SourceCounters --page source --print-source sass --csv \
        python3 tests/device/bench_gemm.py --bits 4 --one 333,14336,4096,gemm_wgmma_ws_176x128x64_s6_streamk --eager \
        > "$OUT/ncu_m333_sass.csv" 2>&1 || status=1
      grep -E "Throughput|Pipe|Stall|Issued|Duration|Memory \[%\]|Registers|Achieved Occ|Theoretical Occ" "$OUT"/ncu_m*.log | head -60 ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done
[[ -n $smi_pid ]] && kill "$smi_pid"
stamp "total, status $status"
exit $status
