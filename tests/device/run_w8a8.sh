#!/usr/bin/env bash
# One device call for W8A8: build the kernels library, run tests/device/w8a8_check.py (quantize bit for bit, every
# W8A8 candidate against float64), the quantize kernel's share of a W8A8 call at M >= 1024 (`share`:
# w8a8_check.py --quantize-share), then the benchmark rows of W8A8 (the dispatch and each warp-specialized tile)
# against cuBLAS FP16 and torch._int_mm (alone and with a torch per-token quantize), all in one run. The SM clock is
# printed before and after.
# Usage: bash tests/device/run_w8a8.sh [check] [share] [bench]   (default all three); logs in $OUT (or ./w8a8_out).
#   W8A8_BENCH_ARGS: options of python -m trt_woq.bench (default below); W8A8_STEP_TIMEOUT: seconds per step.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-w8a8_out}; mkdir -p "$OUT"
STEPS=${*:-check share bench}
SHAPES=4096x4096,14336x4096,4096x28672,8192x57344
sm_clock() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "n/a"; }
run_step() { timeout "${W8A8_STEP_TIMEOUT:-600}" "$@"; }
BDIR=${BDIR:-/tmp/build-w8a8}
t0=$SECONDS
cmake -S . -B "$BDIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > "$OUT/build.log" 2>&1 &&
  cmake --build "$BDIR" --target trt_woq_kernels -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
lib=$BDIR/plugins/kernels/libtrt_woq_kernels.so
echo "built in $((SECONDS - t0)) s"
export TRT_WOQ_KERNELS_PATH=$lib
export PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
echo "SM clock (MHz, current / max) before: $(sm_clock)"
for step in $STEPS; do
  case $step in
    check)
      run_step python3 tests/device/w8a8_check.py 2>&1 | tee "$OUT/check.log" | grep -v "^FAIL"
      [[ ${PIPESTATUS[0]} == 0 ]] || status=1
      grep "^FAIL" "$OUT/check.log" | head -30 ;;
    share)
      run_step python3 tests/device/w8a8_check.py --quantize-share $SHAPES 2>&1 | tee "$OUT/share.log" || status=1 ;;
    bench)
      tiles=w8a8_pc@w8a8_ws_256x128,w8a8_pc@w8a8_ws_128x128,w8a8_pc@w8a8_wsl_128x256,w8a8_pc@w8a8_wsl_64x512
      run_step python3 -m trt_woq.bench ${W8A8_BENCH_ARGS:---m 16,128,256,333,512,768,1024,2048,4096 --shapes $SHAPES \
        --replays 10 --methods cublas_fp16,w8a8_pc,torch_int_mm,torch_int_mm_quant,$tiles,w8a8_pc@w8a8_wsl_128x256_c2} \
        --json "$OUT/bench.json" 2>&1 |
        tee "$OUT/bench.log" | grep -E "W8A8|device|Error|Traceback" || status=1 ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done
echo "SM clock (MHz, current / max) after: $(sm_clock)"
echo "total $((SECONDS - t0)) s, status $status"
exit $status
