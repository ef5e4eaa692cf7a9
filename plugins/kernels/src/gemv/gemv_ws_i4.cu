// Warp-specialized GEMV instances for INT4 weights (gemv_ws.cuh; one file per bit width: parallel builds), with the
// stage releases of the same-run A/B (WsRelease).
#include "gemv/gemv_ws.cuh"

template trt_woq_status trt_woq::gemv::launch_ws<4, trt_woq::gemv::kRelFence>(const trt_woq_linear_params*, bool, int,
                                                                               int, cudaStream_t);
template trt_woq_status trt_woq::gemv::launch_ws<4, trt_woq::gemv::kRelWarp>(const trt_woq_linear_params*, bool, int,
                                                                              int, cudaStream_t);
template trt_woq_status trt_woq::gemv::launch_ws<4, trt_woq::gemv::kRelCta>(const trt_woq_linear_params*, bool, int,
                                                                             int, cudaStream_t);
