#!/usr/bin/env bash
# One device call for the decode kernels: build, correctness, compute-sanitizer, benchmark, ncu.
#   bash tests/device/run_kernels.sh [check|sanitize|bench|ncu ...]   (default: all four, in this order)
# Logs and bench.json go to $OUT (the device tool's folder) or ./kernels-out.
set -uo pipefail
cd "$(dirname "$0")/../.."
[[ -f .device/prelude.sh ]] && source .device/prelude.sh
OUT=${OUT:-$PWD/kernels-out}
mkdir -p "$OUT"
steps=("$@"); [[ ${#steps[@]} -eq 0 ]] && steps=(check sanitize bench ncu)
rc=0

t0=$(date +%s)
lib=build/plugins/kernels/libtrt_woq_kernels.so
if ! { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
        && cmake --build build --target trt_woq_kernels trt_woq_kernels_testing -j16; } > "$OUT/build.log" 2>&1; then
  echo "top-level build failed (tail below); building the kernels alone"; tail -5 "$OUT/build.log"
  lib=build-kernels/kernels/libtrt_woq_kernels.so
  { cmake -S tests/device/kernels_build -B build-kernels -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90a-real && cmake --build build-kernels -j16; } >> "$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; exit 1; }
fi
echo "build: $(( $(date +%s) - t0 )) s -> $lib"
export TRT_WOQ_KERNELS_PATH=$PWD/$lib
export PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

for step in "${steps[@]}"; do
  t0=$(date +%s)
  case $step in
    check)
      timeout 420 python3 tests/device/kernels_check.py 2>&1 | tee "$OUT/check.log" | grep -v "^FAIL" | tail -5
      r=${PIPESTATUS[0]}; grep "^FAIL" "$OUT/check.log" | head -20
      [[ $r -ne 0 ]] && rc=1 ;;
    sanitize)
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 tests/device/kernels_check.py --quick > "$OUT/sanitize.log" 2>&1
      r=$?; echo "compute-sanitizer memcheck (--quick subset): rc $r"; grep -E "passed|ERROR SUMMARY|Invalid" "$OUT/sanitize.log" | head -8
      [[ $r -ne 0 ]] && rc=1 ;;
    bench)
      timeout 400 python3 -m trt_woq.bench --candidates --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
      [[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1 ;;
    ncu)
      # The dispatch's pick for INT4 g128 (14336 x 4096) and INT8 (8192 x 10240), M = 1: one launch each.
      for case in int4_g128,1,14336,4096 int8_pc,1,8192,10240; do
        tag=${case//,/_}
        timeout 150 ncu --clock-control none -k regex:gemv_kernel --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
          --section WarpStateStats --section InstructionStats \
          python3 -m trt_woq.bench --one "$case" > "$OUT/ncu_$tag.log" 2>&1
        echo "-- ncu $case"
        grep -E "DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Block Size|Grid Size|Issue Slots Busy|Eligible Warps|Active Warps Per|No Eligible|Executed Instructions  |Warp Cycles Per Issued" "$OUT/ncu_$tag.log" | head -16
      done ;;
    *) echo "unknown step $step"; rc=1 ;;
  esac
  echo "== $step: $(( $(date +%s) - t0 )) s"
done
exit $rc
