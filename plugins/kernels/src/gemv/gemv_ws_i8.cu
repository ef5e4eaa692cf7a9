// Warp-specialized GEMV instances for INT8 weights (gemv_ws.cuh; one file per bit width: parallel builds).
#include "gemv/gemv_ws.cuh"

template trt_woq_status trt_woq::gemv::launch_ws<8>(const trt_woq_linear_params*, bool, int, int, cudaStream_t);
