// Warp-specialized GEMV, INT4: the sum warp (gemv_ws.cuh).
#include "gemv/gemv_ws.cuh"

template trt_woq_status trt_woq::gemv::launch_ws<4, 1, true>(const trt_woq_linear_params*, bool, int, int, cudaStream_t);
