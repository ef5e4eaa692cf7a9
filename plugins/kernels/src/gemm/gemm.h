/*
 * The tensor-core GEMM's candidates (M > 16), with the same shape as the public candidate API of
 * include/trt_woq/kernels.h so the library's registry can list them next to the GEMV: ids 0 .. count-1 here are
 * local to the GEMM; the registry maps its own ids onto them. The C entries (prefix trt_woq_gemm_) are defined in
 * src/testing_gemm.cu, in the test library only, so the device tests can call the GEMM directly.
 * docs/kernels_gemm.md describes the kernel and its limits.
 */
#ifndef TRT_WOQ_GEMM_H
#define TRT_WOQ_GEMM_H

#include "trt_woq/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

int32_t trt_woq_gemm_candidate_count(void);
trt_woq_status trt_woq_gemm_candidate_describe(int32_t id, char* buf, size_t buf_size);
/* OK when GEMM candidate `id` runs `params` on compute capability `sm` (e.g. 90); only sizes/options are read. */
trt_woq_status trt_woq_gemm_candidate_supports(int32_t id, const trt_woq_linear_params* params, int32_t sm);
/* Bytes of workspace candidate `id` needs (split-K partials); 0 for the candidates without split. */
size_t trt_woq_gemm_workspace_size(int32_t id, const trt_woq_linear_params* params, int32_t sm);
/* The GEMM candidate the heuristic picks for (M, N, K, bits, arch), or -1 when none supports the problem. */
int32_t trt_woq_gemm_dispatch(const trt_woq_linear_params* params, int32_t sm);
/* Launch on `stream`; checks shapes, options, alignment (activation and packed weight 16-byte aligned, the other
 * tensors 4-byte aligned), the arch of the current device, and the workspace. */
trt_woq_status trt_woq_gemm_run(int32_t id, const trt_woq_linear_params* params, void* stream);
/* Name of the last CUDA error recorded in this thread (the library's trt_woq_last_cuda_error), "" if none. */
const char* trt_woq_gemm_last_cuda_error(void);

#ifdef __cplusplus
}

#include <cuda_runtime_api.h>

/* The same, for the library's candidate registry (gemm_candidates.cu): no device query, pointers checked by the
 * caller except the GEMM's own alignment needs. */
namespace trt_woq {
namespace gemm {
constexpr int kCandidateCount = 58;  // gemm.cu checks it against its tile table
/* "gemm_<tile>[_splitk|_tailsplit|_streamk]": the name trt_woq_gemm_candidate_describe() writes and the registry lists. */
const char* candidate_name(int id);
trt_woq_status supports(int id, const trt_woq_linear_params* p, int sm);
size_t workspace(int id, const trt_woq_linear_params* p, int sm);
int heuristic(const trt_woq_linear_params* p, int sm);
/* A CUDA failure is recorded for trt_woq_last_cuda_error() (candidates.h's record_cuda_error). */
trt_woq_status launch(int id, const trt_woq_linear_params* p, cudaStream_t stream);
}  // namespace gemm
}  // namespace trt_woq
#endif

#endif /* TRT_WOQ_GEMM_H */
