// conv_wgmma instances for INT4 weights and bf16 activations (one translation unit per pair: parallel builds).
#define TRT_WOQ_CONV_WGMMA_INSTANCES
#include "conv/wgmma.cuh"

namespace trt_woq {
namespace conv_wgmma {

trt_woq_status launch_i4_bf16(const Launch& l, cudaStream_t stream) { return launch_bits_type<4, __nv_bfloat16>(l, stream); }

}  // namespace conv_wgmma
}  // namespace trt_woq
