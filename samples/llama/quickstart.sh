#!/usr/bin/env bash
# Quantize the bundled Llama-style sample and print the summary and the accuracy against the original.
#
#   bash samples/llama/quickstart.sh [quantize options]      e.g. --bits 8 --group-size -1
#
# Installs this checkout with pip, builds the sample (samples/llama/build_model.py) into $WORKDIR (default: a new
# temporary folder), quantizes it (INT4, groups of 128 unless options say otherwise) and compares the two models
# through polygraphy and ONNX Runtime. Exits non-zero if any step fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
echo "== installing trt-woq from $(pwd)"
if command -v nvcc >/dev/null; then
  # The only slow step, and pip prints nothing while it runs: say so.
  if [ -d build ]; then
    echo "   nvcc found: pip compiles the CUDA kernels again where sources changed (build/ is reused)"
  else
    echo "   nvcc found: pip is compiling the CUDA kernels; the first build takes about 2-5 minutes on 2 cores"
  fi
else
  echo "   no nvcc: installing the pure-Python package (seconds)"
fi
start=$(date +%s)
"$PY" -m pip install --quiet .
echo "   installed in $(( $(date +%s) - start )) s"
WORKDIR=${WORKDIR:-$(mktemp -d -t trt_woq_sample.XXXXXX)}
mkdir -p "$WORKDIR"
echo "== building the sample in $WORKDIR"
"$PY" samples/llama/build_model.py -o "$WORKDIR/llama.onnx"
echo "== quantizing"
"$PY" -m graph_passes quantize "$WORKDIR/llama.onnx" -o "$WORKDIR/llama.woq.onnx" --force "$@"
echo "== accuracy against the original"
"$PY" -m graph_passes compare "$WORKDIR/llama.onnx" "$WORKDIR/llama.woq.onnx"
