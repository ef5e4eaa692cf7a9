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
    {kConvCandidates, &kConvCandidateCount},
    {kW8A8Candidates, &kW8A8CandidateCount},
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

/* kernels.h's tactic rule: 32-bit FNV-1a of the name, reduced to 1 .. 2^31 - 1. */
int32_t tactic_of(const char* name) {
    uint32_t h = 2166136261u;
    for (const unsigned char* c = reinterpret_cast<const unsigned char*>(name); *c != 0; ++c) {
        h = (h ^ *c) * 16777619u;
    }
    return static_cast<int32_t>(h % 0x7fffffffu) + 1;
}

/* Whether the candidates' tactics are distinct, checked once (C++11 makes the initialisation thread-safe); on a
 * collision stderr names both candidates. Not at load time: a family's table may be initialised after this file's. */
bool tactics_unique() {
    static const bool unique = [] {
        const int32_t n = total_count();
        for (int32_t a = 0; a < n; ++a) {
            for (int32_t b = a + 1; b < n; ++b) {
                const char* na = candidate_at(a)->name;
                const char* nb = candidate_at(b)->name;
                if (tactic_of(na) == tactic_of(nb)) {
                    std::fprintf(stderr,
                                 "trt_woq kernels: candidates %d \"%s\" and %d \"%s\" share tactic %d; rename one "
                                 "(every tactic lookup fails until then)\n",
                                 a, na, b, nb, tactic_of(na));
                    return false;
                }
            }
        }
        return true;
    }();
    return unique;
}

bool in_range(int v, int lo, int hi) { return v >= lo && v <= hi; }

bool conv_geometry_ok(const trt_woq_linear_params* p) {
    const trt_woq_conv_geometry& c = p->conv;
    if (c.batch <= 0 || c.in_channels <= 0 || c.in_h <= 0 || c.in_w <= 0 || c.kernel_h <= 0 || c.kernel_w <= 0 ||
        c.stride_h <= 0 || c.stride_w <= 0 || c.dilation_h <= 0 || c.dilation_w <= 0 || c.pad_top < 0 ||
        c.pad_left < 0 || c.pad_bottom < 0 || c.pad_right < 0 || c.out_h <= 0 || c.out_w <= 0 ||
        !in_range(c.k_order, TRT_WOQ_CONV_K_CIJ, TRT_WOQ_CONV_K_IJC) || !in_range(c.activation_nhwc, 0, 1)) {
        return false;
    }
    const int64_t span_h = int64_t(c.in_h) + c.pad_top + c.pad_bottom - int64_t(c.dilation_h) * (c.kernel_h - 1) - 1;
    const int64_t span_w = int64_t(c.in_w) + c.pad_left + c.pad_right - int64_t(c.dilation_w) * (c.kernel_w - 1) - 1;
    return span_h >= 0 && span_w >= 0 && c.out_h == span_h / c.stride_h + 1 && c.out_w == span_w / c.stride_w + 1 &&
           p->m == int64_t(c.batch) * c.out_h * c.out_w && p->k == int64_t(c.in_channels) * c.kernel_h * c.kernel_w;
}

/* Enum values and their combinations: INVALID_ARGUMENT for a value outside its enum or an inconsistent option. */
trt_woq_status check_options(const trt_woq_linear_params* p) {
    const bool valid_enums = in_range(p->act_type, TRT_WOQ_ACT_FP16, TRT_WOQ_ACT_BF16) &&
                             in_range(p->weight_format, TRT_WOQ_WEIGHT_INT8, TRT_WOQ_WEIGHT_FP6_E3M2) &&
                             in_range(p->act_mode, TRT_WOQ_ACT_MODE_WEIGHT_ONLY, TRT_WOQ_ACT_MODE_W8A8_DYNAMIC) &&
                             in_range(p->op, TRT_WOQ_OP_LINEAR, TRT_WOQ_OP_CONV2D) &&
                             in_range(p->epilogue, TRT_WOQ_EPILOGUE_NONE, TRT_WOQ_EPILOGUE_GELU_TANH);
    if (!valid_enums) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    // An activation offset exists only where activations are quantized.
    if (!in_range(p->act_asymmetric, 0, 1) || (p->act_asymmetric && p->act_mode == TRT_WOQ_ACT_MODE_WEIGHT_ONLY)) {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    if (p->op == TRT_WOQ_OP_CONV2D && !conv_geometry_ok(p)) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->epilogue == TRT_WOQ_EPILOGUE_CLIP && !(p->clip_min <= p->clip_max)) {  // also refuses NaN bounds
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    return TRT_WOQ_OK;
}

/* The packed layout of each format and the shape constraints of layout 1 (docs/layouts.md). Layout 2's constraints
 * are checked by the candidates that serve it. */
trt_woq_status check_layout(const trt_woq_linear_params* p) {
    const bool fp6 = p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2;
    if (p->layout_version != (fp6 ? 2 : 1)) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (fp6) return TRT_WOQ_OK;
    const int64_t interleave = p->weight_format == TRT_WOQ_WEIGHT_INT4 ? 4 : 2;
    if (p->k % 64 != 0 || p->n % interleave != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    return TRT_WOQ_OK;
}

/* Checks that hold for every candidate: sizes, enums, the layout's constraints. */
trt_woq_status check_common(const trt_woq_linear_params* p, int32_t sm) {
    if (p == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->m < 0 || p->n <= 0 || p->k <= 0) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    trt_woq_status s = check_options(p);
    if (s != TRT_WOQ_OK) return s;
    s = check_layout(p);
    if (s != TRT_WOQ_OK) return s;
    const int32_t g = p->group_size;
    if (g != -1 && g != 32 && g != 64 && g != 128 && g != 256) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (g != -1 && p->k % g != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (sm < 80) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    return TRT_WOQ_OK;
}

bool serves(const Candidate& c, const trt_woq_linear_params* p) {
    return (c.serves.weight_formats & bit(p->weight_format)) && (c.serves.act_modes & bit(p->act_mode)) &&
           (c.serves.ops & bit(p->op)) && (c.serves.epilogues & bit(p->epilogue));
}

/* check_common, then the candidate's masks, then its own supports(). */
trt_woq_status candidate_supports(const Candidate& c, const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_status s = check_common(p, sm);
    if (s != TRT_WOQ_OK) return s;
    if (!serves(c, p)) return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
    return c.supports(p, sm);
}

/* Why the dispatch found no candidate for `p` (which passed check_common). */
trt_woq_status no_candidate_reason(const trt_woq_linear_params* p) {
    for (const Family& f : kFamilies) {
        for (int i = 0; i < *f.count; ++i) {
            if (serves(f.candidates[i], p)) {
                return p->m > 16 ? TRT_WOQ_ERR_UNSUPPORTED_SHAPE : TRT_WOQ_ERR_UNSUPPORTED_ARCH;
            }
        }
    }
    return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
}

trt_woq_status check_pointers(const trt_woq_linear_params* p, size_t workspace_needed) {
    if (p->activation == nullptr || p->packed_weight == nullptr || p->scales == nullptr || p->output == nullptr) {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    if (p->act_mode == TRT_WOQ_ACT_MODE_W8A8_DYNAMIC && p->act_asymmetric && p->weight_sums == nullptr) {
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

int32_t trt_woq_abi_version(void) {
    return TRT_WOQ_ABI_VERSION;
}

int32_t trt_woq_linear_candidate_count(void) {
    return trt_woq::total_count();
}

int32_t trt_woq_linear_candidate_tactic(int32_t id) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr || !trt_woq::tactics_unique()) return 0;
    return trt_woq::tactic_of(c->name);
}

int32_t trt_woq_linear_candidate_by_tactic(int32_t tactic) {
    if (tactic <= 0 || !trt_woq::tactics_unique()) return -1;
    const int32_t n = trt_woq::total_count();
    for (int32_t id = 0; id < n; ++id) {
        if (trt_woq::tactic_of(candidate_at(id)->name) == tactic) return id;
    }
    return -1;
}

int32_t trt_woq_linear_candidate_by_name(const char* name) {
    if (name == nullptr || !trt_woq::tactics_unique()) return -1;
    const int32_t n = trt_woq::total_count();
    for (int32_t id = 0; id < n; ++id) {
        if (std::strcmp(candidate_at(id)->name, name) == 0) return id;
    }
    return -1;
}

trt_woq_status trt_woq_linear_candidate_describe(int32_t id, char* buf, size_t buf_size) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr || buf == nullptr || buf_size == 0) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    std::snprintf(buf, buf_size, "%s", c->name);
    return TRT_WOQ_OK;
}

trt_woq_status trt_woq_linear_candidate_info(int32_t id, trt_woq_candidate_info* out) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr || out == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    *out = {c->name, c->serves.weight_formats, c->serves.act_modes, c->serves.ops, c->serves.epilogues};
    return TRT_WOQ_OK;
}

trt_woq_status trt_woq_linear_candidate_serves(int32_t id, const trt_woq_linear_params* params) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr || params == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    return trt_woq::serves(*c, params) ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_OPTION;
}

trt_woq_status trt_woq_linear_candidate_supports(int32_t id, const trt_woq_linear_params* params, int32_t sm) {
    const trt_woq::Candidate* c = candidate_at(id);
    if (c == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    return trt_woq::candidate_supports(*c, params, sm);
}

int32_t trt_woq_linear_dispatch(const trt_woq_linear_params* params, int32_t sm) {
    if (trt_woq::check_common(params, sm) != TRT_WOQ_OK) return -1;
    int32_t best = -1;
    int32_t best_score = -1;
    const int32_t n = trt_woq::total_count();
    for (int32_t id = 0; id < n; ++id) {
        const trt_woq::Candidate* c = candidate_at(id);
        if (!trt_woq::serves(*c, params) || c->supports(params, sm) != TRT_WOQ_OK) continue;
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
        if (id < 0) return trt_woq::no_candidate_reason(params);
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
        case TRT_WOQ_ERR_INVALID_ARGUMENT:
            return "invalid argument (null or misaligned pointer, bad enum, negative size, inconsistent option)";
        case TRT_WOQ_ERR_UNSUPPORTED_SHAPE:
            return "unsupported shape (K, N, M or group size not accepted by the layout or kernel)";
        case TRT_WOQ_ERR_UNSUPPORTED_ARCH: return "unsupported architecture (no kernel for this GPU)";
        case TRT_WOQ_ERR_WORKSPACE: return "workspace missing or too small";
        case TRT_WOQ_ERR_CUDA: return "CUDA error (see trt_woq_last_cuda_error)";
        case TRT_WOQ_ERR_UNSUPPORTED_OPTION:
            return "unsupported option (no kernel serves this weight format, activation mode, op or epilogue)";
    }
    return "unknown status";
}

const char* trt_woq_last_cuda_error(void) {
    return trt_woq::g_last_cuda_error;
}

}  // extern "C"
