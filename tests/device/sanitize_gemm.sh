#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck of every GEMM candidate on small odd problems: builds
# tests/device/gemm_sanitize.cu against LIB, a library exporting the GEMM's test entries trt_woq_gemm_* (the test
# library libtrt_woq_kernels_testing.so, which run_gemm.sh builds), and runs it under each tool, logs in
# OUT_DIR/sanitize_{memcheck,racecheck}.log. Exit status 0 when it built and both tools are clean.
# Used by run_gemm.sh (step sanitize) and run_all.sh.  Usage: bash tests/device/sanitize_gemm.sh LIB OUT_DIR
set -u -o pipefail
cd "$(dirname "$0")/../.."
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") out=$2
lib_dir=$(dirname "$lib")
status=0
nvcc -std=c++17 -O2 ${GEMM_ARCH:--gencode arch=compute_90a,code=sm_90a} -Iplugins/kernels/include \
  -Iplugins/kernels/src/gemm tests/device/gemm_sanitize.cu "$lib" -Xlinker -rpath="$lib_dir" \
  -o "$lib_dir/gemm_sanitize" || exit 1
for tool in memcheck racecheck; do
  echo "== compute-sanitizer --tool $tool"
  timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$lib_dir/gemm_sanitize" > "$out/sanitize_$tool.log" 2>&1 \
    || status=1
  tail -4 "$out/sanitize_$tool.log"
done
exit $status
