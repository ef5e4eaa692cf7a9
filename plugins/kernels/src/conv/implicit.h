/*
 * The implicit-GEMM conv2d candidates: their entry points for the conv family's table in conv.cu. implicit.cu:
 * conv_implicit gathers an NCHW activation for K order (c, i, j); conv_implicit_cl gathers channels-last for K order
 * (i, j, c), transposing an NCHW activation into its workspace first. wgmma.cu: conv_wgmma, K order (i, j, c), the
 * warp-specialized wgmma GEMM with a TMA im2col activation tile (channels-last, transposed there as well).
 */
#ifndef TRT_WOQ_CONV_IMPLICIT_H
#define TRT_WOQ_CONV_IMPLICIT_H

#include <cuda_runtime_api.h>

#include "trt_woq/kernels.h"

/* The entry points of one candidate (candidates.h, struct Candidate). */
#define TRT_WOQ_CONV_CANDIDATE_ENTRIES                                        \
    trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm);      \
    size_t workspace(const trt_woq_linear_params* p, int32_t sm);             \
    trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream); \
    int32_t score(const trt_woq_linear_params* p, int32_t sm);

namespace trt_woq {
namespace conv_implicit {
TRT_WOQ_CONV_CANDIDATE_ENTRIES
/* Whether the packed weight is in K order `order` (a 1 x 1 kernel's weight is in both). */
bool order_is(const trt_woq_conv_geometry& g, int32_t order);
}  // namespace conv_implicit
namespace conv_implicit_cl {
TRT_WOQ_CONV_CANDIDATE_ENTRIES
/* Tactics conv_implicit_cl_w4 / _w8 (score_tactic -1: by id only): the kernel with 4 warps per CTA (one K slice)
 * or 8 (two K slices of every chunk), where conv_implicit_cl picks one by the problem. */
trt_woq_status launch_w4(const trt_woq_linear_params* p, cudaStream_t stream);
trt_woq_status launch_w8(const trt_woq_linear_params* p, cudaStream_t stream);
int32_t score_tactic(const trt_woq_linear_params* p, int32_t sm);
}  // namespace conv_implicit_cl
namespace conv_wgmma {
trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm);
int32_t score(const trt_woq_linear_params* p, int32_t sm);
/* The plans (wgmma.cu) and the NCHW stores (wgmma.cuh, ConvIo::store_mode). */
constexpr int kPlanModel = 0, kPlanFill = 1;
constexpr int kStorePairs = 0, kStoreQuads = 1, kStoreScalar = 2;
constexpr int kStoreWidest = 3;  // a store request: the pairs wherever they fit, else the quads
/* The candidate (conv_wgmma: <-1, -1, -1>) and its tactics (score_tactic -1: by id only, e.g. for TensorRT's
 * timing): TILE the token tile (wgmma.cuh's kTiles: 0, 1, 2 for 64, 128, 256 pixels), PLAN kPlanModel or kPlanFill
 * (the tail split of the cost model, or over a whole wave), STORE kStoreWidest, kStoreQuads or kStoreScalar (never
 * kStorePairs, which needs images of 16k pixels); -1 the dispatch's choice. supports() as above. */
template <int TILE, int PLAN, int STORE>
size_t workspace_as(const trt_woq_linear_params* p, int32_t sm);
template <int TILE, int PLAN, int STORE>
trt_woq_status launch_as(const trt_woq_linear_params* p, cudaStream_t stream);
int32_t score_tactic(const trt_woq_linear_params* p, int32_t sm);
}  // namespace conv_wgmma
}  // namespace trt_woq

#undef TRT_WOQ_CONV_CANDIDATE_ENTRIES

#endif /* TRT_WOQ_CONV_IMPLICIT_H */
