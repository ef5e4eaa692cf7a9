// Warp-specialized GEMV, FP6 (tensor copies): 8 consumer warps, two per 32 channels (gemv_ws.cuh).
#include "gemv/gemv_ws.cuh"

template trt_woq_status trt_woq::gemv::launch_ws<6, 8, true>(const trt_woq_linear_params*, bool, int, int, cudaStream_t);
