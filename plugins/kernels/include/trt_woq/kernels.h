/*
 * trt_woq kernels: the plain C ABI shared by the TensorRT plugin, the Python wrapper, the tests and the benchmark.
 *
 * Computes  Y[M, N] = epilogue(X[M, K] @ W[K, N] + bias[N]),  W dequantized on the fly from the packed layout of
 * docs/layouts.md: (U - Z) * S for the integer formats. Conv2d runs as the implicit GEMM of the same product (M
 * output pixels, N output channels, K = in_channels * kernel_h * kernel_w). Nothing here knows TensorRT; no function
 * aborts; every entry returns a status.
 */
#ifndef TRT_WOQ_KERNELS_H
#define TRT_WOQ_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Changes whenever a struct, a signature or the set of functions below changes, or what a value of theirs means;
 * trt_woq_abi_version() returns the library's. */
#define TRT_WOQ_ABI_VERSION 5

typedef enum trt_woq_status {
    TRT_WOQ_OK = 0,
    TRT_WOQ_ERR_INVALID_ARGUMENT = 1,  /* null pointer, bad enum, negative size, inconsistent conv geometry */
    TRT_WOQ_ERR_UNSUPPORTED_SHAPE = 2, /* K, N or group size the layout or the chosen kernel cannot take */
    TRT_WOQ_ERR_UNSUPPORTED_ARCH = 3,  /* no kernel compiled for this GPU, or the candidate needs another arch */
    TRT_WOQ_ERR_WORKSPACE = 4,         /* workspace missing or smaller than trt_woq_linear_workspace_size() */
    TRT_WOQ_ERR_CUDA = 5,              /* a CUDA call failed; trt_woq_last_cuda_error() tells which */
    TRT_WOQ_ERR_UNSUPPORTED_OPTION = 6 /* no candidate (or not this one) serves the weight format, activation mode,
                                          op or epilogue (trt_woq_linear_candidate_info() lists what each serves) */
} trt_woq_status;

typedef enum trt_woq_act_type {
    TRT_WOQ_ACT_FP16 = 0,
    TRT_WOQ_ACT_BF16 = 1
} trt_woq_act_type;

/* Each format has one packed layout (docs/layouts.md): INT8 and INT4 layout 1 (interleaved_v1), FP6 layout 2. */
typedef enum trt_woq_weight_format {
    TRT_WOQ_WEIGHT_INT8 = 0,
    TRT_WOQ_WEIGHT_INT4 = 1,
    TRT_WOQ_WEIGHT_FP6_E3M2 = 2 /* 1 sign, 3 exponent (bias 3), 2 mantissa bits; no Inf/NaN */
} trt_woq_weight_format;

typedef enum trt_woq_act_mode {
    TRT_WOQ_ACT_MODE_WEIGHT_ONLY = 0, /* X is used as given (act_type) */
    TRT_WOQ_ACT_MODE_W8A8_DYNAMIC = 1 /* X is quantized to INT8 per row (per K group when grouped) on the fly */
} trt_woq_act_mode;

typedef enum trt_woq_op {
    TRT_WOQ_OP_LINEAR = 0,
    TRT_WOQ_OP_CONV2D = 1 /* activation NCHW (or NHWC) per `conv`; output [batch, N, out_h, out_w] */
} trt_woq_op;

/* Conv2d: the order of the packed weight's K rows (docs/op.md, WeightOnlyConv attribute `k_order`). */
typedef enum trt_woq_conv_k_order {
    TRT_WOQ_CONV_K_CIJ = 0, /* k = (c * kernel_h + i) * kernel_w + j: the ONNX weight [N, C, kh, kw] flattened */
    TRT_WOQ_CONV_K_IJC = 1  /* k = (i * kernel_w + j) * in_channels + c: one tap's channels contiguous */
} trt_woq_conv_k_order;

/* Applied to X @ W + bias, per output element. */
typedef enum trt_woq_epilogue {
    TRT_WOQ_EPILOGUE_NONE = 0,
    TRT_WOQ_EPILOGUE_RELU = 1,
    TRT_WOQ_EPILOGUE_CLIP = 2,     /* min(max(y, clip_min), clip_max) */
    TRT_WOQ_EPILOGUE_SILU = 3,     /* y * sigmoid(y) */
    TRT_WOQ_EPILOGUE_GELU_ERF = 4, /* 0.5 y (1 + erf(y / sqrt(2))) */
    TRT_WOQ_EPILOGUE_GELU_TANH = 5 /* 0.5 y (1 + tanh(sqrt(2 / pi) (y + 0.044715 y^3))) */
} trt_woq_epilogue;

/* Conv2d geometry (op == TRT_WOQ_OP_CONV2D only): group 1, every size positive, pads >= 0, and
 * out_h == (in_h + pad_top + pad_bottom - dilation_h * (kernel_h - 1) - 1) / stride_h + 1 (out_w likewise);
 * the params' m == batch * out_h * out_w, k == in_channels * kernel_h * kernel_w, n == output channels. */
typedef struct trt_woq_conv_geometry {
    int32_t batch;
    int32_t in_channels;
    int32_t in_h;
    int32_t in_w;
    int32_t kernel_h;
    int32_t kernel_w;
    int32_t stride_h;
    int32_t stride_w;
    int32_t pad_top;
    int32_t pad_left;
    int32_t pad_bottom;
    int32_t pad_right;
    int32_t dilation_h;
    int32_t dilation_w;
    int32_t out_h;
    int32_t out_w;
    int32_t k_order;         /* trt_woq_conv_k_order */
    int32_t activation_nhwc; /* 1: the activation is [batch, in_h, in_w, in_channels] (channels last); 0: NCHW */
} trt_woq_conv_geometry;

/* One call's operands. All pointers are device pointers; activation, output, scales, zeros and bias are of act_type.
 * A zero-initialised struct plus sizes, pointers and format describes a plain weight-only linear. */
typedef struct trt_woq_linear_params {
    const void* activation;    /* [M, K] row-major (linear); [batch, in_channels, in_h, in_w] (conv2d), or
                                  [batch, in_h, in_w, in_channels] with conv.activation_nhwc */
    const void* packed_weight; /* int32 words, layout `layout_version` of docs/layouts.md */
    const void* scales;        /* [K / group, N] row-major; [1, N] when group_size == -1 */
    const void* zeros;         /* zero points, same shape as scales, integer values stored in act_type;
                                  NULL = symmetric */
    const void* bias;          /* [N] or NULL */
    const void* weight_sums;   /* W8A8 with act_asymmetric: per-group sums of the quantized weights, int32
                                  [K / group, N] ([1, N] when group_size == -1), exact; NULL otherwise */
    void* output;              /* [M, N] row-major (linear); [batch, N, out_h, out_w] (conv2d) */
    int64_t m;
    int64_t n;
    int64_t k;
    trt_woq_weight_format weight_format;
    int32_t group_size;     /* -1 (one group per output channel) or 32, 64, 128, 256 */
    int32_t layout_version; /* the format's layout: 1 = interleaved_v1 (INT8, INT4), 2 = FP6 */
    trt_woq_act_type act_type;
    trt_woq_act_mode act_mode;
    int32_t act_asymmetric; /* W8A8 only: 1 = activations quantized with an offset per row block, 0 = symmetric */
    trt_woq_op op;
    trt_woq_epilogue epilogue;
    float clip_min;         /* TRT_WOQ_EPILOGUE_CLIP only; clip_min <= clip_max */
    float clip_max;
    trt_woq_conv_geometry conv;
    void* workspace;        /* may be NULL when trt_woq_linear_workspace_size() is 0 */
    size_t workspace_size;
} trt_woq_linear_params;

/* What a candidate serves: bit masks of (1u << enum value) of trt_woq_weight_format, trt_woq_act_mode, trt_woq_op
 * and trt_woq_epilogue. A candidate is asked about a problem (supports, dispatch, run) only when all four masks
 * cover it. */
typedef struct trt_woq_candidate_info {
    const char* name; /* static storage; the name trt_woq_linear_candidate_describe() writes */
    uint32_t weight_formats;
    uint32_t act_modes;
    uint32_t ops;
    uint32_t epilogues;
} trt_woq_candidate_info;

/* TRT_WOQ_ABI_VERSION of the built library: callers check it before passing any struct. */
int32_t trt_woq_abi_version(void);

/* Kernel candidates. A candidate id is its position in this build's table: stable across calls and processes for
 * one build, but adding a candidate shifts the ids after it, so what outlives a build (a TensorRT engine, a timing
 * cache, a benchmark record) names a candidate by its name or its tactic. -1 asks the built-in dispatch to choose by
 * (M, N, K, arch). */
#define TRT_WOQ_CANDIDATE_AUTO (-1)

/* Number of candidates compiled into this library (for any problem); ids are 0 .. count-1. */
int32_t trt_woq_linear_candidate_count(void);

/* The TensorRT tactic of candidate `id`, a function of its name only: h = 32-bit FNV-1a of the name's bytes (offset
 * basis 2166136261, prime 16777619), tactic = h % (2^31 - 1) + 1, a positive int32, never TensorRT's default 0.
 * Returns 0 for an unknown id, and for every id when two candidates' tactics collide: the library checks all of
 * them on the first tactic lookup and then writes both names to stderr (rename one of them). */
int32_t trt_woq_linear_candidate_tactic(int32_t id);

/* The id of the candidate whose tactic is `tactic` (whose name is `name`), or -1 when this build has none or when
 * tactics collide. */
int32_t trt_woq_linear_candidate_by_tactic(int32_t tactic);
int32_t trt_woq_linear_candidate_by_name(const char* name);

/* Short human-readable name of candidate `id` ("gemv_mma_nt4" ...) copied into buf (NUL-terminated). */
trt_woq_status trt_woq_linear_candidate_describe(int32_t id, char* buf, size_t buf_size);

/* The name and the served (format, activation mode, op, epilogue) masks of candidate `id`. */
trt_woq_status trt_woq_linear_candidate_info(int32_t id, trt_woq_candidate_info* out);

/* TRT_WOQ_OK when candidate `id` serves the weight format, activation mode, op and epilogue of `params` (the masks
 * trt_woq_linear_candidate_info() lists), TRT_WOQ_ERR_UNSUPPORTED_OPTION when it does not, INVALID_ARGUMENT for an
 * unknown id or null params. Sizes are not looked at: which tactics exist for an op, whatever M is. */
trt_woq_status trt_woq_linear_candidate_serves(int32_t id, const trt_woq_linear_params* params);

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
