// The GEMM's entries in the library's candidate registry (candidates.h): one Candidate per (tile configuration,
// split-K) of gemm.cu, in gemm.cu's order. Built only inside trt_woq_kernels (it needs registry.cu).
#include "../candidates.h"
#include "gemm.h"

namespace trt_woq {
namespace {

// The registry lets M = 0 through (a no-op run); the GEMM's own checks want M >= 1.
trt_woq_linear_params at_least_one_row(const trt_woq_linear_params* p) {
    trt_woq_linear_params q = *p;
    if (q.m == 0) q.m = 1;
    return q;
}

template <int ID>
trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_linear_params q = at_least_one_row(p);
    return gemm::supports(ID, &q, sm);
}

template <int ID>
size_t workspace(const trt_woq_linear_params* p, int32_t sm) {
    return p->m == 0 ? 0 : gemm::workspace(ID, p, sm);
}

template <int ID>
trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    const trt_woq_status s = gemm::launch(ID, p, stream);
    return s == TRT_WOQ_ERR_CUDA ? record_cuda_error(gemm::last_cuda_error_code()) : s;
}

// For M > 16 the GEMM heuristic's pick outranks everything (the GEMV scores up to 100); for M <= 16 it stays a
// low-ranked fallback behind the GEMV; the other GEMM candidates are fallbacks, always usable by id.
template <int ID>
int32_t score(const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_linear_params q = at_least_one_row(p);
    if (gemm::heuristic(&q, sm) != ID) return 1;
    return p->m > 16 ? 200 : 5;
}

#define TRT_WOQ_GEMM_CANDIDATE(id, name) {name, supports<id>, workspace<id>, launch<id>, score<id>}

}  // namespace

// Names and order as trt_woq_gemm_candidate_describe() (gemm.cu's tile table, id = 2 * tile + split variant, then
// the stream-K variants of the warp-specialized tiles).
const Candidate kGemmCandidates[] = {
    TRT_WOQ_GEMM_CANDIDATE(0, "gemm_mma_128x128x64_s4"),    TRT_WOQ_GEMM_CANDIDATE(1, "gemm_mma_128x128x64_s4_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(2, "gemm_mma_128x128x64_s3_o2"), TRT_WOQ_GEMM_CANDIDATE(3, "gemm_mma_128x128x64_s3_o2_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(4, "gemm_mma_64x128x64_s4"),     TRT_WOQ_GEMM_CANDIDATE(5, "gemm_mma_64x128x64_s4_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(6, "gemm_mma_32x128x64_s6"),     TRT_WOQ_GEMM_CANDIDATE(7, "gemm_mma_32x128x64_s6_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(8, "gemm_wgmma_64x128x64_s6"),   TRT_WOQ_GEMM_CANDIDATE(9, "gemm_wgmma_64x128x64_s6_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(10, "gemm_wgmma_128x128x64_s4_o2"), TRT_WOQ_GEMM_CANDIDATE(11, "gemm_wgmma_128x128x64_s4_o2_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(12, "gemm_wgmma_64x64x64_s6"),   TRT_WOQ_GEMM_CANDIDATE(13, "gemm_wgmma_64x64x64_s6_splitk"),
    TRT_WOQ_GEMM_CANDIDATE(14, "gemm_wgmma_ws_256x128x64_s5"), TRT_WOQ_GEMM_CANDIDATE(15, "gemm_wgmma_ws_256x128x64_s5_tailsplit"),
    TRT_WOQ_GEMM_CANDIDATE(16, "gemm_wgmma_ws_128x256x64_s6"), TRT_WOQ_GEMM_CANDIDATE(17, "gemm_wgmma_ws_128x256x64_s6_tailsplit"),
    TRT_WOQ_GEMM_CANDIDATE(18, "gemm_wgmma_ws_64x128x64_s8_c2"), TRT_WOQ_GEMM_CANDIDATE(19, "gemm_wgmma_ws_64x128x64_s8_c2_tailsplit"),
    TRT_WOQ_GEMM_CANDIDATE(20, "gemm_wgmma_ws_256x128x64_s5_c2"), TRT_WOQ_GEMM_CANDIDATE(21, "gemm_wgmma_ws_256x128x64_s5_c2_tailsplit"),
    TRT_WOQ_GEMM_CANDIDATE(22, "gemm_wgmma_ws_256x128x64_s5_streamk"), TRT_WOQ_GEMM_CANDIDATE(23, "gemm_wgmma_ws_128x256x64_s6_streamk"),
};
const int kGemmCandidateCount = sizeof(kGemmCandidates) / sizeof(kGemmCandidates[0]);

}  // namespace trt_woq
