/*
 * TEST-ONLY entries of the test library (trt_woq_kernels_testing), declared in gemm/gemm.h: the GEMM's candidates
 * through C, with the GEMM's own ids and heuristic, so the device tests and the sanitizer run every GEMM candidate
 * without the registry. Not in the shipped libtrt_woq_kernels.so.
 */
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#pragma GCC visibility push(default)
#include "gemm/gemm.h"
#pragma GCC visibility pop

namespace {

bool aligned(const void* ptr, uintptr_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; }

}  // namespace

using namespace trt_woq::gemm;

extern "C" {

int32_t trt_woq_gemm_candidate_count(void) { return kCandidateCount; }

trt_woq_status trt_woq_gemm_candidate_describe(int32_t id, char* buf, size_t buf_size) {
    if (id < 0 || id >= kCandidateCount || buf == nullptr || buf_size == 0) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    std::snprintf(buf, buf_size, "%s", candidate_name(id));
    return TRT_WOQ_OK;
}

trt_woq_status trt_woq_gemm_candidate_supports(int32_t id, const trt_woq_linear_params* params, int32_t sm) {
    return supports(id, params, sm);
}

size_t trt_woq_gemm_workspace_size(int32_t id, const trt_woq_linear_params* params, int32_t sm) {
    if (id == TRT_WOQ_CANDIDATE_AUTO) id = heuristic(params, sm);
    return workspace(id, params, sm);  // 0 when id does not support the problem
}

int32_t trt_woq_gemm_dispatch(const trt_woq_linear_params* params, int32_t sm) { return heuristic(params, sm); }

trt_woq_status trt_woq_gemm_run(int32_t id, const trt_woq_linear_params* p, void* stream) {
    if (p == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    int dev = 0, major = 0, minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) return TRT_WOQ_ERR_CUDA;
    const int sm = 10 * major + minor;
    if (id == TRT_WOQ_CANDIDATE_AUTO) id = heuristic(p, sm);
    if (id == -1) {  // the problem's own refusal, else no tile for this arch
        const trt_woq_status st = supports(0, p, sm);
        return st == TRT_WOQ_OK ? TRT_WOQ_ERR_UNSUPPORTED_ARCH : st;
    }
    const trt_woq_status st = supports(id, p, sm);
    if (st != TRT_WOQ_OK) return st;
    if (!p->activation || !p->packed_weight || !p->scales || !p->output) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (!aligned(p->activation, 16) || !aligned(p->packed_weight, 16)) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    return launch(id, p, static_cast<cudaStream_t>(stream));
}

/* "" until a CUDA failure is recorded in this thread (the GEMM records through the registry's record_cuda_error). */
const char* trt_woq_gemm_last_cuda_error(void) { return trt_woq_last_cuda_error(); }

}  // extern "C"
