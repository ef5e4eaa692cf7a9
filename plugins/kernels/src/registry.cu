/*
 * The C ABI of trt_woq/kernels.h: common argument checks, the candidate table and the dispatch.
 */
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

// The library is built with hidden visibility (its static CUDA runtime must not leak); the public C ABI is exported.
#pragma GCC visibility push(default)
#include "trt_woq/kernels.h"
#pragma GCC visibility pop

#include "candidates.h"

namespace trt_woq {
namespace {

struct Family {
    const Candidate* candidates;
    const int* count;
};

/* One line per family; the order fixes candidate ids. */
const Family kFamilies[] = {
    {kGemvCandidates, &kGemvCandidateCount},
    {kGemmCandidates, &kGemmCandidateCount},
};

thread_local char g_last_cuda_error[96] = "";

const Candidate* candidate_at(int32_t id) {
    if (id < 0) return nullptr;
    for (const Family& f : kFamilies) {
        if (id < *f.count) return &f.candidates[id];
        id -= *f.count;
    }
    return nullptr;
}

int32_t total_count() {
    int32_t n = 0;
    for (const Family& f : kFamilies) n += *f.count;
    return n;
}

/* Checks that hold for every candidate: sizes, enums, the layout's constraints (docs/layouts.md). */
trt_woq_status check_common(const trt_woq_linear_params* p, int32_t sm) {
    if (p == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->m < 0 || p->n <= 0 || p->k <= 0) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->act_type != TRT_WOQ_ACT_FP16 && p->act_type != TRT_WOQ_ACT_BF16) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->layout_version != 1) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (p->bits != 4 && p->bits != 8) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (p->k % 64 != 0 || p->n % (p->bits == 4 ? 4 : 2) != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    const int32_t g = p->group_size;
    if (g != -1 && g != 32 && g != 64 && g != 128 && g != 256) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (g != -1 && p->k % g != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (sm < 80) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    return TRT_WOQ_OK;
}

trt_woq_status check_pointers(const trt_woq_linear_params* p, size_t workspace_needed) {
    if (p->activation == nullptr || p->packed_weight == nullptr || p->scales == nullptr || p->output == nullptr) {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    // 16-byte vector loads of weights and activation rows (K % 64 == 0 keeps every row aligned).
    if ((reinterpret_cast<uintptr_t>(p->activation) | reinterpret_cast<uintptr_t>(p->packed_weight)) % 16 != 0) {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    if (workspace_needed > 0 && (p->workspace == nullptr || p->workspace_size < workspace_needed)) {
        return TRT_WOQ_ERR_WORKSPACE;
    }
    return TRT_WOQ_OK;
}

/* Compute capability of the current device, cached per device. */
trt_woq_status current_sm(int32_t* sm) {
    static int32_t cache[64] = {0};
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return record_cuda_error(err);
    if (dev >= 0 && dev < 64 && cache[dev] != 0) {
        *sm = cache[dev];
        return TRT_WOQ_OK;
    }
    int major = 0, minor = 0;
    err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess) return record_cuda_error(err);
    *sm = major * 10 + minor;
    if (dev >= 0 && dev < 64) cache[dev] = *sm;
    return TRT_WOQ_OK;
}

}  // namespace

trt_woq_status record_cuda_error(cudaError_t err) {
    std::snprintf(g_last_cuda_error, sizeof(g_last_cuda_error), "%s", cudaGetErrorName(err));
    if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
        return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    }
    return TRT_WOQ_ERR_CUDA;
}

trt_woq_status check_launch() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? TRT_WOQ_OK : record_cuda_error(err);
}

}  // namespace trt_woq

using trt_woq::candidate_at;

extern "C" {

int32_t trt_woq_linear_candidate_count(void) {
    return trt_woq::total_count();
}

trt_woq_status trt_woq_linear_candidate_describe(int32_t id, char* buf, size_t buf_size) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr || buf == nullptr || buf_size == 0) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    std::snprintf(buf, buf_size, "%s", c->name);
    return TRT_WOQ_OK;
}

trt_woq_status trt_woq_linear_candidate_supports(int32_t id, const trt_woq_linear_params* params, int32_t sm) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    const trt_woq_status s = trt_woq::check_common(params, sm);
    return s != TRT_WOQ_OK ? s : c->supports(params, sm);
}

int32_t trt_woq_linear_dispatch(const trt_woq_linear_params* params, int32_t sm) {
    if (trt_woq::check_common(params, sm) != TRT_WOQ_OK) return -1;
    int32_t best = -1;
    int32_t best_score = -1;
    const int32_t n = trt_woq::total_count();
    for (int32_t id = 0; id < n; ++id) {
        const trt_woq::Candidate* c = candidate_at(id);
        if (c->supports(params, sm) != TRT_WOQ_OK) continue;
        const int32_t score = c->score(params, sm);
        if (score >= 0 && score > best_score) {
            best = id;
            best_score = score;
        }
    }
    return best;
}

size_t trt_woq_linear_workspace_size(int32_t id, const trt_woq_linear_params* params, int32_t sm) {
    if (id == TRT_WOQ_CANDIDATE_AUTO) id = trt_woq_linear_dispatch(params, sm);
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr || trt_woq_linear_candidate_supports(id, params, sm) != TRT_WOQ_OK) return 0;
    return c->workspace(params, sm);
}

trt_woq_status trt_woq_linear_run(int32_t id, const trt_woq_linear_params* params, void* stream) {
    if (params == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    trt_woq_status s = trt_woq::check_pointers(params, 0);  // before any CUDA call: a bad call fails the same anywhere
    if (s != TRT_WOQ_OK) return s;
    int32_t sm = 0;
    s = trt_woq::current_sm(&sm);
    if (s != TRT_WOQ_OK) return s;
    if (id == TRT_WOQ_CANDIDATE_AUTO) {
        s = trt_woq::check_common(params, sm);
        if (s != TRT_WOQ_OK) return s;
        id = trt_woq_linear_dispatch(params, sm);
        if (id < 0) return params->m > 16 ? TRT_WOQ_ERR_UNSUPPORTED_SHAPE : TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    }
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    s = trt_woq_linear_candidate_supports(id, params, sm);
    if (s != TRT_WOQ_OK) return s;
    s = trt_woq::check_pointers(params, c->workspace(params, sm));
    if (s != TRT_WOQ_OK) return s;
    if (params->m == 0) return TRT_WOQ_OK;
    return c->launch(params, static_cast<cudaStream_t>(stream));
}

const char* trt_woq_status_string(trt_woq_status status) {
    switch (status) {
        case TRT_WOQ_OK: return "ok";
        case TRT_WOQ_ERR_INVALID_ARGUMENT: return "invalid argument (null or misaligned pointer, bad enum, negative size)";
        case TRT_WOQ_ERR_UNSUPPORTED_SHAPE: return "unsupported shape (K, N, M or group size not accepted by the layout or kernel)";
        case TRT_WOQ_ERR_UNSUPPORTED_ARCH: return "unsupported architecture (no kernel for this GPU)";
        case TRT_WOQ_ERR_WORKSPACE: return "workspace missing or too small";
        case TRT_WOQ_ERR_CUDA: return "CUDA error (see trt_woq_last_cuda_error)";
    }
    return "unknown status";
}

const char* trt_woq_last_cuda_error(void) {
    return trt_woq::g_last_cuda_error;
}

}  // extern "C"
