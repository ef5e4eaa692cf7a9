#!/usr/bin/env bash
# Full ncu profile of one GEMV case (stall reasons etc.): bash tests/device/kernels_ncu.sh METHOD,M,K,N[,CANDIDATE] ...
set -uo pipefail
cd "$(dirname "$0")/../.."
[[ -f .device/prelude.sh ]] && source .device/prelude.sh >/dev/null
OUT=${OUT:-$PWD/kernels-out}; mkdir -p "$OUT"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a-real > "$OUT/build.log" 2>&1 \
  && cmake --build build --target trt_woq_kernels -j16 >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
export TRT_WOQ_KERNELS_PATH=$PWD/build/plugins/kernels/libtrt_woq_kernels.so PYTHONPATH=$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}
i=0
for spec in "$@"; do
  i=$((i+1))
  timeout 150 ncu --clock-control none -k regex:gemv_kernel --launch-count 1 --set full \
    python3 -m trt_woq.bench --one "$spec" > "$OUT/ncu_full_$i.log" 2>&1
  echo "=== $spec"
  grep -E "^\s+(Duration|DRAM Throughput|Compute \(SM\) Throughput|L2 Cache Throughput|Achieved Occupancy|Issue Slots Busy|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Executed Ipc Active|Registers Per Thread|Dynamic Shared Memory Per Block|Grid Size|Block Size|L1/TEX Hit Rate|L2 Hit Rate|Mem Pipes Busy)" "$OUT/ncu_full_$i.log" | sed 's/  */ /g'
  grep -iE "stall|on average, each warp" "$OUT/ncu_full_$i.log" | head -6 | cut -c1-300
done
