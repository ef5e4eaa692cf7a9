#!/usr/bin/env bash
# One device call for W8A8: build the kernels library, run tests/device/w8a8_check.py (quantize bit for bit, every
# W8A8 candidate against float64), the quantize kernel's share of a W8A8 call at M >= 1024 (`share`:
# w8a8_check.py --quantize-share), then the benchmark rows of W8A8 (the dispatch and each warp-specialized tile)
# against cuBLAS FP16 and torch._int_mm (alone and with a torch per-token quantize), all in one run. The SM clock is
# printed before and after.
# Usage: bash tests/device/run_w8a8.sh [check|quick] [share] [timeline] [bench] [ncu]   (default check share bench);
# logs in $OUT (or ./w8a8_out).
#   quick: w8a8_check.py --quick. ncu: Nsight Compute counters (tensor pipe, L2, DRAM, stalls) of the quantize and
#   the GEMM kernel for each case of W8A8_NCU_CASES ("CANDIDATE,M,K,N ...", default below), clocks left alone.
#   timeline: the quantize kernel's and the GEMM's device time and the gap between them (w8a8_check.py --timeline)
#   for each case of W8A8_TIMELINE_CASES ("KxNxM[@CANDIDATE],...", default below).
#   W8A8_CHECK_ARGS: more options of w8a8_check.py (e.g. --only NAME,...); W8A8_BENCH_ARGS: options of
#   python -m trt_woq.bench (default below); W8A8_STEP_TIMEOUT: seconds per step; CMAKE_CUDA_FLAGS: extra nvcc flags
#   for the build (e.g. --split-compile=0); W8A8_LIB: a library built beforehand for sm_90a (no build).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-w8a8_out}; mkdir -p "$OUT"
STEPS=${*:-check share bench}
SHAPES=4096x4096,14336x4096,4096x28672,8192x57344
sm_clock() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "n/a"; }
run_step() { timeout "${W8A8_STEP_TIMEOUT:-600}" "$@"; }
# The counters that exist in this Nsight Compute (names differ between versions), one launch of the GEMM per case.
ncu_counters() {
  local ncu avail metrics="" name case cand m k n
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [[ -n $ncu ]] || { echo "ncu: not found"; return 1; }
  avail=$("$ncu" --query-metrics 2>/dev/null | awk '{print $1}')
  for name in gpu__time_duration.sum sm__cycles_elapsed.avg.per_second \
      sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
      sm__inst_executed_pipe_tensor_op_gmma.sum sm__throughput.avg.pct_of_peak_sustained_elapsed \
      lts__t_sector_hit_rate.pct lts__throughput.avg.pct_of_peak_sustained_elapsed lts__t_bytes.sum \
      dram__throughput.avg.pct_of_peak_sustained_elapsed dram__bytes_read.sum \
      l1tex__data_pipe_lsu_wavefronts_mem_shared.sum smsp__cycles_active.avg \
      $(grep -E '^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active$' <<<"$avail" | sed 's/$/.ratio/'); do
    grep -qx "${name%%.*}" <<<"$avail" && metrics+=${metrics:+,}$name
  done
  for case in ${W8A8_NCU_CASES:-w8a8_wsl_128x256,1024,4096,4096 w8a8_wsl_128x256,333,14336,4096}; do
    IFS=, read -r cand m k n <<<"$case"
    echo "== ncu $cand M=$m K=$k N=$n"
    # the second call's two kernels (the first call's are skipped)
    run_step "$ncu" --clock-control none -k regex:'quantize|gemm_s8_ws' --launch-skip 2 --launch-count 2 \
      --metrics "$metrics" python3 -m trt_woq.bench --one "w8a8_pc@$cand,$m,$k,$n" > "$OUT/ncu_${cand}_$m.log" 2>&1
    grep -E "^ +[a-z]+__|Context [0-9]+, Stream" "$OUT/ncu_${cand}_$m.log" |
      awk '/Context/ {print /quantize/ ? " [quantize]" : " [gemm]"; next} $NF != "0" {print "  " $1, $(NF-1), $NF}' ||
      { tail -5 "$OUT/ncu_${cand}_$m.log"; return 1; }
  done
}
BDIR=${BDIR:-/tmp/build-w8a8}
t0=$SECONDS
if [[ -n ${W8A8_LIB:-} ]]; then
  lib=$(realpath "$W8A8_LIB")
else
  cmake -S . -B "$BDIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    ${CMAKE_CUDA_FLAGS:+"-DCMAKE_CUDA_FLAGS=$CMAKE_CUDA_FLAGS"} > "$OUT/build.log" 2>&1 &&
    cmake --build "$BDIR" --target trt_woq_kernels -j16 >> "$OUT/build.log" 2>&1 \
      || { tail -40 "$OUT/build.log"; exit 1; }
  lib=$BDIR/plugins/kernels/libtrt_woq_kernels.so
  echo "built in $((SECONDS - t0)) s"
fi
export TRT_WOQ_KERNELS_PATH=$lib
export PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
echo "SM clock (MHz, current / max) before: $(sm_clock)"
for step in $STEPS; do
  case $step in
    check|quick)
      run_step python3 tests/device/w8a8_check.py $([[ $step == quick ]] && echo --quick) ${W8A8_CHECK_ARGS:-} 2>&1 |
        tee "$OUT/$step.log" | grep -v "^FAIL"
      [[ ${PIPESTATUS[0]} == 0 ]] || status=1
      grep "^FAIL" "$OUT/$step.log" | head -30 ;;
    ncu)
      ncu_counters || status=1 ;;
    timeline)
      run_step python3 tests/device/w8a8_check.py --timeline \
        "${W8A8_TIMELINE_CASES:-4096x4096x128,4096x4096x333,4096x4096x1024,14336x4096x333}" 2>&1 |
        tee "$OUT/timeline.log" || status=1 ;;
    share)
      run_step python3 tests/device/w8a8_check.py --quantize-share $SHAPES 2>&1 | tee "$OUT/share.log" || status=1 ;;
    bench)
      tiles=w8a8_pc@w8a8_ws_128x128,w8a8_pc@w8a8_wsl_128x256
      for c in 1x1 2x1 1x2 2x2; do tiles+=,w8a8_pc@w8a8_wsc_128x256_$c; done
      run_step python3 -m trt_woq.bench ${W8A8_BENCH_ARGS:---m 16,128,256,333,512,768,1024,2048,4096 --shapes $SHAPES \
        --replays 10 --methods cublas_fp16,w8a8_pc,torch_int_mm,torch_int_mm_quant,$tiles} \
        --json "$OUT/bench.json" 2>&1 |
        tee "$OUT/bench.log" | grep -E "W8A8|device|Error|Traceback" || status=1 ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done
echo "SM clock (MHz, current / max) after: $(sm_clock)"
echo "total $((SECONDS - t0)) s, status $status"
exit $status
