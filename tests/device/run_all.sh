#!/usr/bin/env bash
# The whole GPU verification of a commit in one device call: build the kernels, the plugin and its conformance
# harness once for sm_90a, then run every device check against that one build:
#   1. kernels_check.py      converters (exhaustive), GEMV, dispatch through the public C ABI
#   2. gemm_check.py         every GEMM candidate and the dispatch for all M
#   2b. fp6_check.py         FP6 converters (every code in every position) and the FP6 GEMV through the C ABI
#   2c. conv_check.py        every epilogue on every linear candidate, and conv2d against a float64 conv
#   2d. w8a8_check.py        W8A8: the quantize step bit for bit, every W8A8 candidate and the dispatch
#   3. the plugin harness    WeightOnlyLinear and WeightOnlyConv driven as TensorRT does (one line each): linear
#                            synthetic cases (weight-only INT8 / INT4 / FP6, W8A8 symmetric / asymmetric) and every
#                            node of quantized Llama samples made here (INT8 pc, INT4 pc / g128 / g128 asym, W8A8
#                            pc / g128 asym; FP16 / BF16); conv synthetic cases (1x1 / 3x3 / 7x7, stride, dilation,
#                            padding, INT8 / INT4, every fused activation)
#   4. GPU pytest files      tests/plugins/kernels, tests/python/trt_woq
#   5. compute-sanitizer     memcheck on kernels_check.py --quick (GEMV, converters, dispatch); memcheck and
#                            racecheck on every GEMM candidate over small odd problems (gemm_sanitize.cu)
# Usage (device call carrying .device/whl .device/tensorrt .device/prelude.sh):
#   bash tests/device/run_all.sh          prints one line per check and a closing `N passed, N failed`
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
source .device/prelude.sh
OUT=${OUT:-$root/device-out}
mkdir -p "$OUT"
export PYTHONPATH=$root/python:$root${PYTHONPATH:+:$PYTHONPATH}
bdir=build/all
passed=0 failed=0
record() {  # record NAME STATUS
  if [[ $2 -eq 0 ]]; then passed=$((passed + 1)); echo "PASS $1"; else failed=$((failed + 1)); echo "FAIL $1 (exit $2)"; fi
}

t0=$SECONDS
# --split-compile=0: nvcc optimises the kernels of the large files (gemm.cu, w8a8.cu) on several threads.
cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_CUDA_FLAGS=--split-compile=0 \
  -DTENSORRT_INCLUDE_DIR="$TENSORRT_INCLUDE_DIR" > "$OUT/cmake.log" 2>&1 \
  && cmake --build $bdir --target trt_woq_kernels trt_woq_kernels_testing trt_woq_plugin \
    plugin_conformance -j16 > "$OUT/build.log" 2>&1
build=$?
record "build (kernels, their test library, plugin, harness) in $((SECONDS - t0)) s" $build
[[ $build -ne 0 ]] && { tail -30 "$OUT/build.log"; echo "$passed passed, $failed failed"; exit 1; }
export TRT_WOQ_KERNELS_PATH=$root/$bdir/plugins/kernels/libtrt_woq_kernels.so
export TRT_WOQ_KERNELS_LIB=$TRT_WOQ_KERNELS_PATH
# The test entries (converters, the GEMM's own candidates) live in the test library only.
export TRT_WOQ_KERNELS_TESTING_PATH=$root/$bdir/plugins/kernels/libtrt_woq_kernels_testing.so
export TRT_WOQ_GEMM_LIB=$TRT_WOQ_KERNELS_TESTING_PATH
export TRT_WOQ_PLUGIN_PATH=$root/$bdir/plugins/weight_only_linear/libtrt_woq_plugin.so

report() {  # report NAME LOG STATUS SECONDS: the log's FAIL lines and tail, then one PASS / FAIL line
  grep -E "^FAIL" "$OUT/$2" | head -10
  tail -2 "$OUT/$2" | sed 's/^/    /'
  record "$1 in $4 s" "$3"
}
run_check() {  # run_check NAME LOG COMMAND...
  local name=$1 log=$2; shift 2
  local t=$SECONDS
  "$@" > "$OUT/$log" 2>&1
  report "$name" "$log" $? $((SECONDS - t))
}
# The device checks share the GPU but are mostly host-side references: run them at once, report in order.
bg_names=() bg_logs=() bg_pids=()
start_check() {  # start_check NAME LOG COMMAND...
  local name=$1 log=$2; shift 2
  ( t=$SECONDS; "$@" > "$OUT/$log" 2>&1; rc=$?; echo "$rc $((SECONDS - t))" > "$OUT/$log.rc" ) &
  bg_names+=("$name") bg_logs+=("$log") bg_pids+=($!)
}
finish_checks() {
  local i rc secs
  for i in "${!bg_pids[@]}"; do
    wait "${bg_pids[$i]}"
    read -r rc secs < "$OUT/${bg_logs[$i]}.rc" || { rc=1 secs=0; }
    report "${bg_names[$i]}" "${bg_logs[$i]}" "$rc" "$secs"
  done
  bg_names=() bg_logs=() bg_pids=()
}

start_check "kernels_check.py" kernels_check.log timeout 420 python3 tests/device/kernels_check.py
start_check "gemm_check.py" gemm_check.log timeout 420 python3 tests/device/gemm_check.py
start_check "fp6_check.py" fp6_check.log timeout 300 python3 tests/device/fp6_check.py
start_check "conv_check.py" conv_check.log timeout 300 python3 tests/device/conv_check.py
start_check "w8a8_check.py" w8a8_check.log timeout 300 python3 tests/device/w8a8_check.py
start_check "compute-sanitizer memcheck, kernels_check.py --quick" sanitize_kernels.log \
  env PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 tests/device/kernels_check.py --quick
start_check "compute-sanitizer memcheck + racecheck, gemm_sanitize" sanitize_gemm.log \
  bash tests/device/sanitize_gemm.sh "$TRT_WOQ_GEMM_LIB" "$OUT"

# Plugin harness inputs: the synthetic matrices plus the nodes of Llama samples quantized here.
h=tests/plugins/conformance
models=()
python3 samples/llama/build_model.py --hidden 256 --intermediate 768 --layers 1 --heads 4 -o $bdir/llama.onnx \
  > "$OUT/models.log" 2>&1
for opts in "--bits 8 --group-size -1" "--bits 4 --group-size -1" "--bits 4 --group-size 128" \
            "--bits 4 --group-size 128 --asymmetric --act-dtype bf16" "--bits 8 --group-size -1 --act-mode w8a8" \
            "--bits 8 --act-mode w8a8 --act-asymmetric --act-dtype bf16"; do
  tag=$(echo "$opts" | tr -d ' -')
  python3 -m graph_passes quantize $bdir/llama.onnx -o $bdir/llama.$tag.onnx --force -q $opts >> "$OUT/models.log" 2>&1 \
    && models+=(--model $bdir/llama.$tag.onnx)
done
echo "    harness models: ${#models[@]} / 12 arguments (6 quantized samples expected)"
python3 $h/make_cases.py $bdir/cases --synthetic "${models[@]}" > "$OUT/cases.log" 2>&1
python3 $h/make_cases.py $bdir/cases_conv --op conv >> "$OUT/cases.log" 2>&1
run_check "plugin conformance harness, WeightOnlyLinear" harness.log \
  $bdir/tests/plugins/conformance/plugin_conformance "$TRT_WOQ_PLUGIN_PATH" $bdir/cases
run_check "plugin conformance harness, WeightOnlyConv" harness_conv.log \
  $bdir/tests/plugins/conformance/plugin_conformance "$TRT_WOQ_PLUGIN_PATH" $bdir/cases_conv

run_check "pytest GPU files" pytest.log python3 -m pytest -q -rs tests/plugins/kernels tests/python/trt_woq

finish_checks
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
