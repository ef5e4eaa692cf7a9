#!/usr/bin/env bash
# One device call for issue 18: build the kernels, the epilogue + conv2d device test, the conv benchmark.
#   bash tests/device/run_conv.sh [check|sanitize|ncu|bench|linears ...]   (default: all but ncu)
# CONV_CHECK_ARGS passes options to conv_check.py (e.g. --convs-only); CONV_BENCH_ROWS (e.g. 0,7) limits the bench
# to those rows of bench_conv.CONVS, CONV_BENCH_VARIANTS (e.g. cl,wgmma) to those columns of bench_conv.VARIANTS
# (CONV_NCU_ROWS / CONV_NCU_VARIANTS the same for the ncu step);
# CHECK_TIMEOUT / NCU_TIMEOUT / BENCH_TIMEOUT bound the steps (seconds).
# Logs and bench_conv.json go to $OUT (the device tool's folder) or ./conv-out.
set -uo pipefail
cd "$(dirname "$0")/../.."
[[ -f .device/prelude.sh ]] && source .device/prelude.sh
OUT=${OUT:-$PWD/conv-out}
mkdir -p "$OUT"
steps=("$@"); [[ ${#steps[@]} -eq 0 ]] && steps=(check sanitize bench linears)
rc=0
t0=$(date +%s)
build=${BUILD_DIR:-/tmp/build-conv}
# --split-compile: the largest files (w8a8.cu, gemm.cu) optimise their kernels on several threads; the build is on
# the critical path of a device call.
{ cmake -S tests/device/kernels_build -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_CUDA_FLAGS=--split-compile=0 \
    && cmake --build "$build" -j16 --target trt_woq_kernels; } > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
lib=$(find "$build" -name libtrt_woq_kernels.so | head -1)
echo "build: $(( $(date +%s) - t0 )) s -> $lib"
export TRT_WOQ_KERNELS_PATH=$lib
export PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
for step in "${steps[@]}"; do
  t0=$(date +%s)
  case $step in
    check)
      timeout ${CHECK_TIMEOUT:-240} python3 tests/device/conv_check.py ${CONV_CHECK_ARGS:-} 2>&1 | tee "$OUT/check.log" | grep -v "^FAIL" | tail -5
      r=${PIPESTATUS[0]}; grep "^FAIL" "$OUT/check.log" | head -20
      [[ $r -ne 0 ]] && rc=1 ;;
    sanitize)
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout ${SANITIZE_TIMEOUT:-200} compute-sanitizer --tool memcheck \
        --error-exitcode 9 python3 tests/device/conv_check.py --convs-only --quick > "$OUT/sanitize.log" 2>&1
      r=$?; echo "compute-sanitizer memcheck (convs): rc $r"
      grep -E "passed|ERROR SUMMARY|Invalid|at 0x|by thread|FAIL" "$OUT/sanitize.log" | head -12
      [[ $r -ne 0 ]] && rc=1 ;;
    ncu)  # per-kernel Nsight Compute figures of every conv path and cuDNN (rows: CONV_NCU_ROWS, default 0,7,11)
      timeout ${NCU_TIMEOUT:-150} python3 tests/device/conv_ncu.py "${CONV_NCU_ROWS:-0,7,11}" "$OUT" \
        ${CONV_NCU_VARIANTS:-} 2>&1 \
        | tee "$OUT/ncu.log" ;;
    bench)  # every conv row in one process (the CUDA graphs of a failing method are reported in its row)
      timeout ${BENCH_TIMEOUT:-200} python3 -m trt_woq.bench_conv --no-linears --json "$OUT/bench_conv.json" \
        ${CONV_BENCH_ROWS:+--conv-rows $CONV_BENCH_ROWS} ${CONV_BENCH_VARIANTS:+--variants $CONV_BENCH_VARIANTS} 2>&1 \
        | tee "$OUT/bench.log" | grep -v "^device"
      [[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1 ;;
    linears)  # the fused activation's cost on linear layers
      timeout 100 python3 -m trt_woq.bench_conv --conv-rows 0 --json "$OUT/bench_linear.json" 2>&1 \
        | tee "$OUT/bench_linear.log" | tail -5 ;;
  esac
  echo "$step: $(( $(date +%s) - t0 )) s"
done
exit $rc
