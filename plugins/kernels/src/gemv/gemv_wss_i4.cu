// Warp-specialized GEMV, INT4: 4 consumer warps and the sum warp (gemv_ws.cuh).
#include "gemv/gemv_ws.cuh"

template trt_woq_status trt_woq::gemv::launch_ws<4, 4, true>(const trt_woq_linear_params*, bool, int, int, cudaStream_t);
