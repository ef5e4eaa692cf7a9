/*
 * trt_woq kernels: the plain C ABI shared by the TensorRT plugin, the Python wrapper, the tests and the benchmark.
 *
 * Computes  Y[M, N] = X[M, K] @ W[K, N] (+ bias[N]),  W = (U - Z) * S  dequantized on the fly from the packed
 * layout of docs/layouts.md. Nothing here knows TensorRT; no function aborts; every entry returns a status.
 */
#ifndef TRT_WOQ_KERNELS_H
#define TRT_WOQ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRT_WOQ_ABI_VERSION 1

typedef enum trt_woq_status {
    TRT_WOQ_OK = 0,
    TRT_WOQ_ERR_INVALID_ARGUMENT = 1,  /* null pointer, bad enum, negative size */
    TRT_WOQ_ERR_UNSUPPORTED_SHAPE = 2, /* K, N or group size the layout or the chosen kernel cannot take */
    TRT_WOQ_ERR_UNSUPPORTED_ARCH = 3,  /* no kernel compiled for this GPU, or the candidate needs another arch */
    TRT_WOQ_ERR_WORKSPACE = 4,         /* workspace missing or smaller than trt_woq_linear_workspace_size() */
    TRT_WOQ_ERR_CUDA = 5               /* a CUDA call failed; trt_woq_last_cuda_error() tells which */
} trt_woq_status;

typedef enum trt_woq_act_type {
    TRT_WOQ_ACT_FP16 = 0,
    TRT_WOQ_ACT_BF16 = 1
} trt_woq_act_type;

/* One call's operands. All pointers are device pointers; activation, output, scales, zeros and bias are of act_type. */
typedef struct trt_woq_linear_params {
    const void* activation;    /* [M, K] row-major */
    const void* packed_weight; /* int32 words, layout `layout_version` of docs/layouts.md */
    const void* scales;        /* [K / group, N] row-major; [1, N] when group_size == -1 */
    const void* zeros;         /* zero points, same shape as scales, integer values stored in act_type; NULL = symmetric */
    const void* bias;          /* [N] or NULL */
    void* output;              /* [M, N] row-major */
    int64_t m;
    int64_t n;
    int64_t k;
    int32_t bits;           /* 8 or 4 */
    int32_t group_size;     /* -1 (one group per output channel) or 32, 64, 128, 256 */
    int32_t layout_version; /* 1 = interleaved_v1 */
    trt_woq_act_type act_type;
    void* workspace;        /* may be NULL when trt_woq_linear_workspace_size() is 0 */
    size_t workspace_size;
} trt_woq_linear_params;

/* Kernel candidates (the plugin exposes them as TensorRT tactics). Candidate ids are stable across calls and
 * processes for one build of the library; -1 asks the built-in dispatch to choose by (M, N, K, arch). */
#define TRT_WOQ_CANDIDATE_AUTO (-1)

/* Number of candidates compiled into this library (for any problem); ids are 0 .. count-1. */
int32_t trt_woq_linear_candidate_count(void);

/* Short human-readable name of candidate `id` ("gemv_int4_warp4" ...) copied into buf (NUL-terminated). */
trt_woq_status trt_woq_linear_candidate_describe(int32_t id, char* buf, size_t buf_size);

/* TRT_WOQ_OK when candidate `id` can run `params` on a device of compute capability sm (e.g. 90), otherwise the
 * reason as a status. Pointers in params are not read; only sizes and options. */
trt_woq_status trt_woq_linear_candidate_supports(int32_t id, const trt_woq_linear_params* params, int32_t sm);

/* The candidate the dispatch would choose for these sizes and options on compute capability sm, or -1 if none. */
int32_t trt_woq_linear_dispatch(const trt_woq_linear_params* params, int32_t sm);

/* Workspace bytes candidate `id` (or TRT_WOQ_CANDIDATE_AUTO) needs for these sizes; 0 when none. */
size_t trt_woq_linear_workspace_size(int32_t id, const trt_woq_linear_params* params, int32_t sm);

/* Launch on `stream` (a cudaStream_t; NULL = legacy default stream). Asynchronous; returns after the launch. */
trt_woq_status trt_woq_linear_run(int32_t id, const trt_woq_linear_params* params, void* stream);

/* Static description of a status code. */
const char* trt_woq_status_string(trt_woq_status status);

/* The cudaError_t name of the last CUDA failure seen by this library in this thread, or "" if none. */
const char* trt_woq_last_cuda_error(void);

#ifdef __cplusplus
}
#endif

#endif /* TRT_WOQ_KERNELS_H */
