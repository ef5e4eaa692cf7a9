/*
 * The candidate registry's internal interface. A kernel family (the GEMV here, a GEMM elsewhere) defines an array of
 * Candidate entries and its length in its own translation unit; registry.cu lists the families once, in a fixed order,
 * so candidate ids (positions in the concatenation) are stable for one build.
 *
 * Adding a family: define `extern const trt_woq::Candidate kFooCandidates[]; extern const int kFooCandidateCount;`
 * in your .cu (declare them below) and add one line `{kFooCandidates, &kFooCandidateCount}` to kFamilies in registry.cu.
 */
#ifndef TRT_WOQ_CANDIDATES_H
#define TRT_WOQ_CANDIDATES_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "trt_woq/kernels.h"

namespace trt_woq {

struct Candidate {
    const char* name;  // short, stable, e.g. "gemv_i4_nt2_w4"
    /* TRT_WOQ_OK when this candidate can run the sizes and options of `p` on compute capability `sm` (e.g. 90).
     * Called only after the common checks of check_common() passed; reads no pointers. */
    trt_woq_status (*supports)(const trt_woq_linear_params* p, int32_t sm);
    /* Workspace bytes for `p` (0 for none). */
    size_t (*workspace)(const trt_woq_linear_params* p, int32_t sm);
    /* Enqueue on `stream`; pointers are checked by the caller, shapes by supports(). */
    trt_woq_status (*launch)(const trt_woq_linear_params* p, cudaStream_t stream);
    /* The dispatch's preference for `p` on `sm`: among supported candidates, the highest score wins (ties: lowest id);
     * a negative score means "never pick automatically" (still usable by id, e.g. as a TensorRT tactic). */
    int32_t (*score)(const trt_woq_linear_params* p, int32_t sm);
};

/* Families. */
extern const Candidate kGemvCandidates[];
extern const int kGemvCandidateCount;
extern const Candidate kGemmCandidates[];  // src/gemm/gemm_candidates.cu (M > 16)
extern const int kGemmCandidateCount;

/* Records a failed CUDA call for trt_woq_last_cuda_error() and returns TRT_WOQ_ERR_CUDA. */
trt_woq_status record_cuda_error(cudaError_t err);

/* Launch-time check: TRT_WOQ_OK, or the status of the last launch error (recorded). */
trt_woq_status check_launch();

}  // namespace trt_woq

#endif /* TRT_WOQ_CANDIDATES_H */
