/*
 * Conv2d (op TRT_WOQ_OP_CONV2D) as an explicit im2col GEMM on the linear candidates:
 *   1. im2col: the NCHW (or NHWC) activation -> patches [M = batch * out_h * out_w, K = in_channels * kernel_h *
 *      kernel_w] in the workspace, K in the packed weight's order (k_order: (c, i, j) or (i, j, c), docs/op.md),
 *      zeros outside the input;
 *   2. the linear dispatch's candidate for [M, K] x [K, N] with the bias and the fused epilogue, into the workspace;
 *   3. a tiled transpose [batch, out_h * out_w, N] -> the NCHW output [batch, N, out_h, out_w].
 * The tensors stay NCHW (TensorRT's kLINEAR, what a plain ONNX Conv carries); the price is the patch matrix (K / C
 * times the input) written and read once, and the output transposed once: small next to the weights for the
 * weight-bound convs at small batch that this op is for. A true implicit GEMM would gather the patches in the GEMM's
 * own loads.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "candidates.h"
#include "conv/implicit.h"
#include "conv/transpose.cuh"

namespace trt_woq {
namespace conv {
namespace {

constexpr size_t kAlign = 256;

size_t round_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

size_t act_bytes(const trt_woq_linear_params*) { return 2; }  // FP16 and BF16

/* The linear problem of step 2 (pointers into `ws` when given, else null: for sizes and dispatch only). */
trt_woq_linear_params inner_params(const trt_woq_linear_params* p, char* ws, size_t* cols_bytes, size_t* out_bytes) {
    trt_woq_linear_params q = *p;
    q.op = TRT_WOQ_OP_LINEAR;
    q.conv = trt_woq_conv_geometry{};
    *cols_bytes = round_up(size_t(p->m) * size_t(p->k) * act_bytes(p));
    *out_bytes = round_up(size_t(p->m) * size_t(p->n) * act_bytes(p));
    q.activation = ws;
    q.output = ws ? ws + *cols_bytes : nullptr;
    q.workspace = ws ? ws + *cols_bytes + *out_bytes : nullptr;
    q.workspace_size = p->workspace_size > *cols_bytes + *out_bytes ? p->workspace_size - *cols_bytes - *out_bytes : 0;
    return q;
}

trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm) {
    // int32 patch indexing inside a row, int64 across rows; grid.y / z of the transpose.
    if (p->k > (1 << 28) || int64_t(p->conv.out_h) * p->conv.out_w > (int64_t(65535) * 32) ||
        p->conv.batch > 65535) {
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
    size_t a = 0, b = 0;
    const trt_woq_linear_params q = inner_params(p, nullptr, &a, &b);
    return trt_woq_linear_dispatch(&q, sm) >= 0 ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
}

size_t workspace(const trt_woq_linear_params* p, int32_t sm) {
    size_t cols = 0, out = 0;
    const trt_woq_linear_params q = inner_params(p, nullptr, &cols, &out);
    return cols + out + trt_woq_linear_workspace_size(TRT_WOQ_CANDIDATE_AUTO, &q, sm);
}

/* One thread per patch element (row m, column k); consecutive threads walk k, so the stores are contiguous and the
 * loads of one kernel row (j, K order (c, i, j)) or of one tap (c, K order (i, j, c) on an NHWC activation) are too. */
template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ cols, trt_woq_conv_geometry g, int64_t total,
                              int k) {
    const int taps = g.kernel_h * g.kernel_w;
    const int pixels = g.out_h * g.out_w;
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t m = idx / k;
        const int kk = int(idx - m * k);
        const bool ijc = g.k_order == TRT_WOQ_CONV_K_IJC;
        const int c = ijc ? kk % g.in_channels : kk / taps, tap = ijc ? kk / g.in_channels : kk - c * taps;
        const int i = tap / g.kernel_w, j = tap - i * g.kernel_w;
        const int b = int(m / pixels), pix = int(m - int64_t(b) * pixels);
        const int oy = pix / g.out_w, ox = pix - oy * g.out_w;
        const int iy = oy * g.stride_h - g.pad_top + i * g.dilation_h;
        const int ix = ox * g.stride_w - g.pad_left + j * g.dilation_w;
        T v = T(0.f);
        if (iy >= 0 && iy < g.in_h && ix >= 0 && ix < g.in_w) {
            v = x[g.activation_nhwc ? ((int64_t(b) * g.in_h + iy) * g.in_w + ix) * g.in_channels + c
                                    : ((int64_t(b) * g.in_channels + c) * g.in_h + iy) * g.in_w + ix];
        }
        cols[idx] = v;
    }
}

template <typename T>
trt_woq_status launch_typed(const trt_woq_linear_params* p, cudaStream_t stream) {
    size_t cols_bytes = 0, out_bytes = 0;
    trt_woq_linear_params q = inner_params(p, static_cast<char*>(p->workspace), &cols_bytes, &out_bytes);
    const int64_t total = p->m * p->k;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((total + threads - 1) / threads, 1 << 20));
    im2col_kernel<T><<<blocks, threads, 0, stream>>>(static_cast<const T*>(p->activation),
                                                     static_cast<T*>(const_cast<void*>(q.activation)), p->conv, total,
                                                     static_cast<int>(p->k));
    trt_woq_status s = check_launch();
    if (s != TRT_WOQ_OK) return s;
    s = trt_woq_linear_run(TRT_WOQ_CANDIDATE_AUTO, &q, stream);
    if (s != TRT_WOQ_OK) return s;
    return transpose<T>(static_cast<const T*>(q.output), static_cast<T*>(p->output), p->conv.batch,
                        p->conv.out_h * p->conv.out_w, static_cast<int>(p->n), stream);
}

trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    return p->act_type == TRT_WOQ_ACT_BF16 ? launch_typed<__nv_bfloat16>(p, stream) : launch_typed<half>(p, stream);
}

int32_t score(const trt_woq_linear_params*, int32_t) { return 1; }

}  // namespace
}  // namespace conv

// conv_wgmma and its tactics: (name, score, tile, plan, store), see implicit.h.
#define TRT_WOQ_CONV_WGMMA(NAME, SCORE, TILE, PLAN, STORE)                                                  \
    {NAME, kIntWeightOnlyConv, conv_wgmma::supports, conv_wgmma::workspace_as<TILE, PLAN, STORE>,          \
     conv_wgmma::launch_as<TILE, PLAN, STORE>, conv_wgmma::SCORE}
const Candidate kConvCandidates[] = {
    {"conv_im2col", kIntWeightOnlyConv, conv::supports, conv::workspace, conv::launch, conv::score},
    {"conv_implicit", kIntWeightOnlyConv, conv_implicit::supports, conv_implicit::workspace, conv_implicit::launch,
     conv_implicit::score},
    {"conv_implicit_cl", kIntWeightOnlyConv, conv_implicit_cl::supports, conv_implicit_cl::workspace,
     conv_implicit_cl::launch, conv_implicit_cl::score},
    {"conv_implicit_cl_w4", kIntWeightOnlyConv, conv_implicit_cl::supports, conv_implicit_cl::workspace,
     conv_implicit_cl::launch_w4, conv_implicit_cl::score_tactic},
    {"conv_implicit_cl_w8", kIntWeightOnlyConv, conv_implicit_cl::supports, conv_implicit_cl::workspace,
     conv_implicit_cl::launch_w8, conv_implicit_cl::score_tactic},
    TRT_WOQ_CONV_WGMMA("conv_wgmma", score, -1, -1, -1),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_t64", score_tactic, 0, conv_wgmma::kPlanModel, -1),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_t128", score_tactic, 1, conv_wgmma::kPlanModel, -1),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_t256", score_tactic, 2, conv_wgmma::kPlanModel, -1),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_model", score_tactic, -1, conv_wgmma::kPlanModel, conv_wgmma::kStoreWidest),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_fill", score_tactic, -1, conv_wgmma::kPlanFill, conv_wgmma::kStoreWidest),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_quads", score_tactic, -1, conv_wgmma::kPlanModel, conv_wgmma::kStoreQuads),
    TRT_WOQ_CONV_WGMMA("conv_wgmma_scalar", score_tactic, -1, conv_wgmma::kPlanModel, conv_wgmma::kStoreScalar),
};
#undef TRT_WOQ_CONV_WGMMA
const int kConvCandidateCount = sizeof(kConvCandidates) / sizeof(kConvCandidates[0]);

}  // namespace trt_woq
