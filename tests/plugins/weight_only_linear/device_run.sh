#!/usr/bin/env bash
# WeightOnlyLinear plugin checks on the lent GPU machine, in two calls (TensorRT-RTX travels in two halves, see
# ../shared/device/README.md). Logs go to $OUT (or ./device_out).
#
#   call 1, carry .device/trtrtx/a .device/prelude.sh .device/tensorrt third_party/tensorrt-10.13-include
#                 build/c_models:
#     bash tests/plugins/weight_only_linear/device_run.sh harness
#       builds libtrt_woq_plugin (TensorRT 11.1 headers) + the conformance harness, and the plugin again against the
#       10.13 headers; runs the harness on the linear and conv synthetic matrices and on every plugin node of the
#       models in build/c_models; then compute-sanitizer memcheck on a short run.
#   call 2 (at once, same warm machine), carry .device/whl .device/prelude.sh .device/tensorrt .device/trtrtx/b
#                                              build/c_models:
#     bash tests/plugins/weight_only_linear/device_run.sh rtx
#       TensorRT-RTX: load each plugin build, parse the minimal model, a W8A8 and a WeightOnlyConv one-node model and
#       the quantized samples, build engines.
set -uo pipefail
mode=${1:?harness or rtx}
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
out=${OUT:-$root/device_out}
mkdir -p "$out"
source .device/prelude.sh
bdir=build/dev-c
here=tests/plugins/weight_only_linear
cases=tests/plugins/conformance
harness=$bdir/tests/plugins/conformance/plugin_conformance

if [[ $mode == harness ]]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  t0=$SECONDS
  cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real \
    -DTENSORRT_INCLUDE_DIR="$TENSORRT_INCLUDE_DIR" > "$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
  grep "trt_woq:" "$out/cmake.log"
  cmake --build $bdir --target trt_woq_plugin trt_woq_polygraphy plugin_conformance > "$out/build.log" 2>&1 \
    || { grep -B2 -A8 "error" "$out/build.log" | head -60; exit 1; }
  echo "build: $((SECONDS - t0)) s"
  quick=${QUICK:-0}
  # The same plugin sources against TensorRT 10.13's headers, linked to the kernels just built.
  mkdir -p $bdir/plugin1013
  g++ -std=c++17 -O2 -fPIC -shared -fvisibility=hidden -Wl,--version-script=plugins/weight_only_linear/exports.map \
    -isystem third_party/tensorrt-10.13-include -isystem /usr/local/cuda/include -Iplugins/kernels/include \
    plugins/weight_only_linear/{pluginLibrary,pluginLogger,weightOnlyLinearPlugin}.cpp \
    -L$bdir/plugins/kernels -ltrt_woq_kernels -Wl,-rpath,"$root/$bdir/plugins/kernels" \
    -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -o $bdir/plugin1013/libtrt_woq_plugin.so \
    && echo "plugin against TensorRT 10.13 headers: built" || echo "plugin against TensorRT 10.13 headers: FAILED"
  g++ -std=c++17 -O2 -fPIC -shared $here/rtx/terminate_backtrace.cpp -o $bdir/terminate_backtrace.so
  lib=$bdir/plugins/weight_only_linear/libtrt_woq_plugin.so
  nm -D --defined-only $lib | awk '{print "exported:", $3}'
  models=()
  for m in build/c_models/*.onnx; do [[ -f $m ]] && models+=(--model "$m"); done
  [[ $quick == 1 ]] && { echo "QUICK=1: built only"; exit 0; }
  python3 $cases/make_cases.py $bdir/cases --synthetic "${models[@]}" || exit 1
  python3 $cases/make_cases.py $bdir/cases_conv --op conv || exit 1
  t0=$SECONDS
  rc=0
  for dir in cases cases_conv; do
    $harness $lib $bdir/$dir 2>&1 | tee "$out/conformance_$dir.log" | grep -v "^  \[plugin log\]"
    [[ ${PIPESTATUS[0]} -ne 0 ]] && rc=1
  done
  echo "harness exit $rc, $((SECONDS - t0)) s"
  # memcheck over the synthetic cases at small sizes (kernels under memcheck are slow).
  python3 $cases/make_cases.py $bdir/cases_small --synthetic -k 256 -n 128 --max-m 64 > /dev/null
  timeout 240 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 $harness $lib $bdir/cases_small \
    > "$out/memcheck.log" 2>&1
  memcheck=$?
  clean=$(grep -c "ERROR SUMMARY: 0 errors" "$out/memcheck.log")
  echo "memcheck exit $memcheck ($clean clean summaries): $(tail -2 "$out/memcheck.log" | tr '\n' ' ')"
  # The runtime's tests (the cuda-python buffer test runs here; TensorRT-dependent parts skip or use fakes).
  PYTHONPATH=$root/python:$root:${PYTHONPATH:-} python3 -m pytest -q -rs tests/python/trt_woq 2>&1 | tail -4
  exit $rc
fi

if [[ $mode == rtx ]]; then
  if [[ ! -f /tmp/site/tensorrt_rtx_libs/libtensorrt_rtx.so.1 ]]; then
    echo "TensorRT-RTX not assembled (fresh machine: half a is missing); run the harness call first"; exit 3
  fi
  if [[ ! -f $bdir/plugins/weight_only_linear/libtrt_woq_plugin.so ]]; then
    echo "plugin not built on this machine (run the harness call first)"; exit 3
  fi
  which gdb || true
  plugins=(--plugin "$root/$bdir/plugins/weight_only_linear/libtrt_woq_plugin.so")
  [[ -f $bdir/plugin1013/libtrt_woq_plugin.so ]] && plugins+=(--plugin "$root/$bdir/plugin1013/libtrt_woq_plugin.so")
  models=(--onnx "$bdir/woq_minimal.onnx")
  python3 -c "
import sys; sys.path.insert(0, '$here/rtx'); from pathlib import Path
import rtx_build_check as r; r.write_minimal_model(Path('$bdir/woq_minimal.onnx'))"
  for m in build/c_models/*.onnx; do [[ -f $m ]] && models+=(--onnx "$m"); done
  rtxlibs=/tmp/site/tensorrt_rtx_libs
  # The wheel ships libtensorrt_rtx.so.1 only; TensorRT-RTX's ONNX parser dlopen()s "libtensorrt_rtx.so" (found
  # through its RPATH $ORIGIN) the first time it imports a node as a plugin. A: as shipped, B: with the dev symlink.
  rm -f $rtxlibs/libtensorrt_rtx.so
  echo "== A: wheel as shipped (no libtensorrt_rtx.so symlink), minimal model"
  python3 $here/rtx/rtx_build_check.py "${plugins[@]:0:2}" --onnx "$bdir/woq_minimal.onnx" \
    --preload "$root/$bdir/terminate_backtrace.so" --out "$out/as_shipped" | grep -v "^  /\|^  \[" | tail -8
  ln -s libtensorrt_rtx.so.1 $rtxlibs/libtensorrt_rtx.so
  echo "== B: with $rtxlibs/libtensorrt_rtx.so -> libtensorrt_rtx.so.1"
  python3 $here/rtx/rtx_build_check.py "${plugins[@]}" "${models[@]}" --node-models \
    --preload "$root/$bdir/terminate_backtrace.so" --out "$out"
  rc=$?
  # D: an invalid node (group_size 96): the creator refuses it and its message must reach TensorRT's logger. A
  # plugin built against 10.x headers calls ILogger::log through the 10.x vtable layout (11.x added
  # IVersionedInterface slots in front), so in TensorRT-RTX 1.7 (11.x interfaces) its message goes astray.
  python3 -c "
import sys; sys.path.insert(0, '$here/rtx'); from pathlib import Path
import rtx_build_check as r; r.write_minimal_model(Path('$bdir/woq_bad_group96.onnx'), group=96)"
  echo "== D: invalid node, message through TensorRT's logger"
  python3 $here/rtx/rtx_build_check.py "${plugins[@]}" --onnx "$bdir/woq_bad_group96.onnx" \
    --expect-log "group_size 96" --out "$out/invalid" | grep -v "^  /\|^  \[" | tail -8
  # E: polygraphy --plugins only dlopens; the plugin library does not self-register, the adapter registers it.
  echo "== E: polygraphy convert --plugins, TensorRT-RTX"
  for lib in plugins/weight_only_linear/libtrt_woq_plugin.so plugins/weight_only_linear/libtrt_woq_polygraphy.so; do
    POLYGRAPHY_USE_TENSORRT_RTX=1 PYTHONPATH=$root/python:$root:${PYTHONPATH:-} python3 -c \
      "import sys; from polygraphy.tools import main; sys.exit(main())" convert build/c_models/llama16.int4g128.onnx \
      --plugins "$root/$bdir/$lib" --trt-min-shapes "hidden_states:[1,1,256]" \
      --trt-opt-shapes "hidden_states:[1,16,256]" --trt-max-shapes "hidden_states:[4,64,256]" -o "$bdir/pg.engine" \
      > "$bdir/pg.log" 2>&1
    convert=$?
    said=$(grep -h -m3 "registered\|Plugin not found\|Saving engine\|Error\|PASSED\|FAILED" "$bdir/pg.log" \
      | tr '\n' ' ')
    echo "polygraphy convert --plugins $(basename $lib): exit $convert; $said"
    rm -f "$bdir/pg.engine"
  done
  # The Python runtime and the CLI against TensorRT-RTX's Python API: build_engine through `trt_woq build`.
  echo "== C: python -m trt_woq build (trt_woq.engine.build_engine) with TensorRT-RTX"
  for m in build/c_models/llama16.int4g128.onnx build/c_models/llama32.int4g128asym_bf16.onnx; do
    [[ -f $m ]] || continue
    rm -f "$bdir/$(basename "$m" .onnx).engine"
    PYTHONPATH=$root/python:$root:${PYTHONPATH:-} TRT_WOQ_TENSORRT_MODULE=tensorrt_rtx \
      TRT_WOQ_PLUGIN_PATH=$root/$bdir/plugins/weight_only_linear/libtrt_woq_plugin.so \
      python3 -m trt_woq build "$m" -o "$bdir/$(basename "$m" .onnx).engine" 2>&1 | tail -5
    built=${PIPESTATUS[0]}
    bytes=$(stat -c %s "$bdir/$(basename "$m" .onnx).engine" 2>/dev/null || echo none)
    echo "trt_woq build $m: exit $built, engine $bytes bytes"
  done
  exit $rc
fi
echo "unknown mode $mode"; exit 2
