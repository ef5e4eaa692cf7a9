// Warp-specialized GEMV instances for INT4 weights, FP16 and BF16 activations (gemv_ws.cuh).
#include "gemv/gemv_ws.cuh"

namespace trt_woq {
namespace gemv {

trt_woq_status launch_ws_i4(const trt_woq_linear_params* p, int sms, int smem_per_sm, cudaStream_t stream) {
    return p->act_type == TRT_WOQ_ACT_BF16 ? launch_ws_typed<__nv_bfloat16, 4>(p, sms, smem_per_sm, stream)
                                           : launch_ws_typed<half, 4>(p, sms, smem_per_sm, stream);
}

}  // namespace gemv
}  // namespace trt_woq
