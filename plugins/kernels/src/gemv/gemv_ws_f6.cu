// Warp-specialized GEMV instances for FP6 E3M2 weights, layout 2 (gemv_ws.cuh; tensor copies only).
#include "gemv/gemv_ws.cuh"

template trt_woq_status trt_woq::gemv::launch_ws<6>(const trt_woq_linear_params*, bool, int, int, cudaStream_t);
