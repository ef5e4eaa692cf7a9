#!/usr/bin/env bash
# One device call for the GEMM (issue 4): build the GEMM alone (no dependency on the rest of the kernels library),
# run the numerics test, compute-sanitizer memcheck + racecheck on small odd problems, the benchmark, and ncu on one
# compute-bound case. Logs go to $OUT (or ./gemm_out). Usage: bash tests/device/run_gemm.sh [check|bench|trtbench|sass|ncu|all]...
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gemm_out}; mkdir -p "$OUT" build
STEPS=${*:-all}
[[ " $STEPS " == *" all "* ]] && STEPS="check bench sass ncu"
ARCH=${GEMM_ARCH:--gencode arch=compute_90a,code=sm_90a}
status=0
has() { [[ " $STEPS " == *" $1 "* || " $STEPS " == *" all "* ]]; }
t0=$(date +%s)
nvcc -std=c++17 -O3 -Xcompiler -fPIC -shared $ARCH -lineinfo -Iplugins/kernels/include -Xptxas -v \
  plugins/kernels/src/gemm/gemm.cu -o build/libtrt_woq_gemm.so > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
grep -E "spill" "$OUT/build.log" | sort | uniq -c
echo "build: $(( $(date +%s) - t0 ))s"
export TRT_WOQ_GEMM_LIB=$PWD/build/libtrt_woq_gemm.so
if has check || has trtbench; then  # the whole kernels library, for the public-ABI cross-check (skipped if it does not build)
  cmake -S . -B build/cm -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90a-real > "$OUT/cmake.log" 2>&1 &&
    cmake --build build/cm --target trt_woq_kernels >> "$OUT/cmake.log" 2>&1 &&
    export TRT_WOQ_KERNELS_LIB=$PWD/build/cm/plugins/kernels/libtrt_woq_kernels.so || echo "kernels library did not build (see cmake.log)"
  echo "library build: $(( $(date +%s) - t0 ))s"
fi
if has check; then
  python3 tests/device/gemm_check.py 2>&1 | tee "$OUT/check.log" | grep -v "^FAIL" ; [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  grep "^FAIL" "$OUT/check.log" | head -30
  nvcc -std=c++17 -O2 $ARCH -Iplugins/kernels/include -Iplugins/kernels/src/gemm tests/device/gemm_sanitize.cu \
    -Lbuild -ltrt_woq_gemm -Xlinker -rpath=$PWD/build -o build/gemm_sanitize || status=1
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    compute-sanitizer --tool $tool --error-exitcode 9 build/gemm_sanitize > "$OUT/sanitize_$tool.log" 2>&1 || status=1
    tail -4 "$OUT/sanitize_$tool.log"
  done
  echo "check: $(( $(date +%s) - t0 ))s"
fi
if has bench; then
  python3 tests/device/bench_gemm.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" || status=1
  echo "bench: $(( $(date +%s) - t0 ))s"
fi
if has trtbench && [[ -n "${TRT_WOQ_KERNELS_LIB:-}" ]]; then  # the package's benchmark, through the public ABI's dispatch
  TRT_WOQ_KERNELS_PATH=$TRT_WOQ_KERNELS_LIB PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH} python3 -m trt_woq.bench \
    --m 1,4,16,64,256,1024,4096 --shapes 4096x28672,14336x4096,8192x57344 --methods int4_g128,cublas_fp16 \
    --json "$OUT/trt_woq_bench.json" 2>&1 | tee "$OUT/trt_woq_bench.log" | tail -40 || status=1
  echo "trtbench: $(( $(date +%s) - t0 ))s"
fi
if has sass; then  # instruction mix per kernel: HMMA (mma.sync) or HGMMA (wgmma) vs everything else
  cuobjdump -sass build/libtrt_woq_gemm.so > "$OUT/sass.txt" 2>&1
  awk '/Function :/{f=$3} /^ +\/\*[0-9a-f]{4}\*\//{n[f]++} /HMMA/{h[f]++} /HGMMA/{g[f]++} /LDSM/{l[f]++}
       END{for (k in n) printf "%6d instr %5d HMMA %5d HGMMA %5d LDSM  %s\n", n[k], h[k], g[k], l[k], k}' "$OUT/sass.txt" | sort -k9
fi
if has ncu; then
  # The compute-bound case of the largest shape through the warp-specialized 256x128 tile, and the M=64 case.
  ncu --clock-control none --kernel-name 'regex:gemm_.*mma(_ws)?_kernel' --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
    python3 tests/device/bench_gemm.py --one 4096,8192,57344,${NCU_BIG_CAND:-14} > "$OUT/ncu_m4096.log" 2>&1 || status=1
  ncu --clock-control none --kernel-name 'regex:gemm_.*mma(_ws)?_kernel' --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section MemoryWorkloadAnalysis \
    python3 tests/device/bench_gemm.py --one 64,4096,28672,${NCU_M64_CAND:-8} > "$OUT/ncu_m64.log" 2>&1 || status=1
  grep -E "Throughput|Pipe|Stall|Issued|Duration|Memory \[%\]|Registers|Achieved Occ|Theoretical Occ" "$OUT"/ncu_m*.log | head -60
fi
echo "total: $(( $(date +%s) - t0 ))s, status $status"
exit $status
