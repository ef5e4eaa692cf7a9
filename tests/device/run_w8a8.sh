#!/usr/bin/env bash
# One device call for W8A8: build the kernels library, run tests/device/w8a8_check.py (quantize bit for bit, every
# W8A8 candidate against float64), then the benchmark rows of W8A8 against cuBLAS FP16, our INT8 weight-only
# kernel and torch._int_mm (alone and with a torch per-token quantize), all in one run.
# Usage: bash tests/device/run_w8a8.sh [check] [bench]   (default both); logs in $OUT (or ./w8a8_out).
#   W8A8_BENCH_ARGS: options of python -m trt_woq.bench (default below).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-w8a8_out}; mkdir -p "$OUT"
STEPS=${*:-check bench}
BDIR=${BDIR:-/tmp/build-w8a8}
t0=$SECONDS
cmake -S . -B "$BDIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > "$OUT/build.log" 2>&1 &&
  cmake --build "$BDIR" --target trt_woq_kernels -j16 >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
lib=$BDIR/plugins/kernels/libtrt_woq_kernels.so
echo "built in $((SECONDS - t0)) s"
export TRT_WOQ_KERNELS_PATH=$lib
export PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
for step in $STEPS; do
  case $step in
    check)
      python3 tests/device/w8a8_check.py 2>&1 | tee "$OUT/check.log" | grep -v "^FAIL"; [[ ${PIPESTATUS[0]} == 0 ]] || status=1
      grep "^FAIL" "$OUT/check.log" | head -30 ;;
    bench)
      python3 -m trt_woq.bench ${W8A8_BENCH_ARGS:---m 1,16,128,256,512,1024,4096 --shapes 4096x4096,14336x4096,4096x28672 \
        --methods cublas_fp16,int8_pc,w8a8_pc,w8a8_g128,torch_int_mm,torch_int_mm_quant,w8a8_pc@w8a8_mma_128x128,w8a8_pc@w8a8_wgmma_128x128,w8a8_pc@w8a8_wgmma_64x128,w8a8_pc@w8a8_wgmma_128x256} --json "$OUT/bench.json" 2>&1 |
        tee "$OUT/bench.log" | grep -E "W8A8|device|Error" || status=1 ;;
    *) echo "unknown step $step"; status=1 ;;
  esac
done
echo "total $((SECONDS - t0)) s, status $status"
exit $status
