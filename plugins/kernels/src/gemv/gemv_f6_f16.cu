// GEMV instances for FP6 E3M2 weights (layout 2) and f16 activations (one translation unit per pair: parallel builds).
#include "gemv/gemv_kernel.cuh"

namespace trt_woq {
namespace gemv {

trt_woq_status launch_f6_f16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream) {
    return launch_typed<half, 6>(plan, p, stream);
}

}  // namespace gemv
}  // namespace trt_woq
