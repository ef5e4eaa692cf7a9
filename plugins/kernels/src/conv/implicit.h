/*
 * The implicit-GEMM conv2d candidates (implicit.cu): their entry points for the conv family's table in conv.cu.
 * conv_implicit gathers an NCHW activation for K order (c, i, j); conv_implicit_cl gathers channels-last for K order
 * (i, j, c), transposing an NCHW activation into its workspace first.
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
}  // namespace conv_implicit
namespace conv_implicit_cl {
TRT_WOQ_CONV_CANDIDATE_ENTRIES
}  // namespace conv_implicit_cl
}  // namespace trt_woq

#undef TRT_WOQ_CONV_CANDIDATE_ENTRIES

#endif /* TRT_WOQ_CONV_IMPLICIT_H */
