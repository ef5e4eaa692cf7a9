/*
 * Candidate `conv_wgmma` (wgmma.cu): conv2d as an implicit GEMM on the warp-specialized wgmma kernel of
 * gemm/gemm_wgmma_ws.cuh, its activation tile loaded by TMA in im2col mode straight from the channels-last input.
 *
 * With K ordered (i, j, c) and C % 64 == 0, K tile kt is one filter tap (i, j) and 64 channels c0 .. c0 + 63. A token
 * tile is TOK consecutive output pixels m0 .. (row-major over batch, out_h, out_w, across rows and images); the TMA
 * im2col box {64 channels, TOK pixels} of the NHWC input [B, H, W, C] at pixel (b, oy * s - pad_top, ox * s -
 * pad_left) of pixel m0, shifted by the tap's offset (i * d, j * d), walks the output pixels in that order: the
 * traversal steps by the conv's stride inside the bounding box [-pad, size + pad_end - d (k - 1) - 1] of each spatial
 * dimension, wraps to the next row and the next image, and zero-fills reads outside the input (the padding) and past
 * the last image. The shared-memory tile is the GEMM's: pixels x 128 bytes with the 128-byte swizzle. The staged
 * output tile (FP32, [pixel][channel]) is written straight into the NCHW output, bias and epilogue applied. Everything
 * else (weight TMA, conversion, wgmma, stream-K / whole tiles) is the GEMM kernel's.
 */
#pragma once

#include "candidates.h"
#include "conv/implicit.h"
#include "gemm/gemm_wgmma_ws.cuh"
#include "pdl.cuh"

namespace trt_woq {
namespace conv_wgmma {

/* The kernel's Io policy (gemm::WsRowsIo's interface). */
struct ConvIo {
    int in_channels, kernel_w, out_w, out_pixels;  // out_pixels = out_h * out_w
    int stride_h, stride_w, pad_top, pad_left, dilation_h, dilation_w;
    /* The NCHW store (store()): kStorePairs, kStoreQuads or kStoreScalar. */
    int store_mode;

    /* K element k0 of pixel row0 -> the im2col coordinates of its tap and first pixel. The first load waits for
     * the kernel ahead (the input's transpose, the counters' clearing) under a programmatic launch. */
    __device__ __forceinline__ void load(uint32_t dst, const CUtensorMap* map, int k0, int row0, uint32_t bar,
                                         uint16_t mask) const {
#ifdef TRT_WOQ_WGMMA
        pdl_wait();
        const int tap = k0 / in_channels, c0 = k0 - tap * in_channels;
        const int i = tap / kernel_w, j = tap - i * kernel_w;
        const int b = row0 / out_pixels, pix = row0 - b * out_pixels;
        const int oy = pix / out_w, ox = pix - oy * out_w;
        const int w = ox * stride_w - pad_left, h = oy * stride_h - pad_top;
        const uint16_t off_w = static_cast<uint16_t>(j * dilation_w), off_h = static_cast<uint16_t>(i * dilation_h);
        const uint64_t desc = reinterpret_cast<uint64_t>(map);
        if (mask != 0)
            asm volatile(
                "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes.multicast::cluster"
                " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8}, %9;\n" ::"r"(dst),
                "l"(desc), "r"(c0), "r"(w), "r"(h), "r"(b), "r"(bar), "h"(off_w), "h"(off_h), "h"(mask)
                : "memory");
        else
            asm volatile(
                "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(dst),
                "l"(desc), "r"(c0), "r"(w), "r"(h), "r"(b), "r"(bar), "h"(off_w), "h"(off_h)
                : "memory");
#endif
    }

    /* The staged tile epi[TOK][PITCH] (pixels m0 .., channels n0 ..) + bias, epilogue -> out[b][n][pixel]. Every
     * mode keeps 8 or more outputs in flight per thread: the activation's latency (two MUFU operations for SiLU)
     * overlaps, where one output per iteration left it exposed (8 warps per SM, after the main loop). */
    template <int TOK, int CH, int PITCH, typename OutT>
    __device__ __forceinline__ void store(const float* epi, int ctid, int m0, int n0, const gemm::GemmArgs& args,
                                          OutT* out) const {
        visit_epilogue(args.ep, [&](auto kind) {
            constexpr int KIND = decltype(kind)::value;
            if (store_mode == kStorePairs)
                store_pairs<TOK, CH, PITCH, KIND>(epi, ctid, m0, n0, args, out);
            else if (store_mode == kStoreQuads)
                store_quads<TOK, CH, PITCH, KIND>(epi, ctid, m0, n0, args, out);
            else
                store_scalar<TOK, CH, PITCH, KIND>(epi, ctid, m0, n0, args, out);
        });
    }

    /* out_pixels % 16 == 0 and a 32-byte aligned output: the lanes 2i, 2i + 1 take channel t / 2 and the two halves
     * of each run of 16 consecutive pixels (16 + 16 bytes: one whole 32-byte sector per lane pair and store
     * instruction; a lone 16-byte half measured 40 % slower on 8 x 256 56x56, an L2 sector filled from DRAM per
     * half). The odd lane reads its 8 staged rows in the order q ^ 4, so the two lanes of a pair hit banks 16
     * apart (no conflict). Two runs in flight: 16 outputs per thread. */
    template <int TOK, int CH, int PITCH, int KIND, typename OutT>
    __device__ __forceinline__ void store_pairs(const float* epi, int ctid, int m0, int n0, const gemm::GemmArgs& args,
                                                OutT* out) const {
        static_assert(gemm::kWsConsumers * 128 == 2 * CH && TOK % 16 == 0, "a lane pair per channel");
        const int h = ctid & 1, c = ctid >> 1, n = n0 + c, rot = 4 * h;
        if (n >= args.n) return;
        const OutT* bias = static_cast<const OutT*>(args.bias);
        const float bn = bias != nullptr ? float(bias[n]) : 0.f;
        OutT* column = out + size_t(n) * out_pixels;
        using T2 = typename gemm::Ops<OutT>::T2;
#pragma unroll 2
        for (int run = 0; run < TOK / 16; ++run) {
            const int r0 = 16 * run + 8 * h, m = m0 + r0;
            if (m >= args.m) continue;  // M % 16 == 0: all 8 pixels or none
            float y[8];
#pragma unroll
            for (int q = 0; q < 8; ++q)
                y[q] = apply_epilogue_kind<KIND>(epi[(r0 + (q ^ rot)) * PITCH + c] + bn, args.ep);
            uint32_t words[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                T2 t;
                t.x = OutT(h ? y[(2 * e) ^ 4] : y[2 * e]);
                t.y = OutT(h ? y[(2 * e + 1) ^ 4] : y[2 * e + 1]);
                words[e] = *reinterpret_cast<uint32_t*>(&t);
            }
            const int b = m / out_pixels, pix = m - b * out_pixels;
            *reinterpret_cast<uint4*>(column + size_t(b) * args.n * out_pixels + pix) =
                make_uint4(words[0], words[1], words[2], words[3]);
        }
    }

    /* Any image: thread t keeps pixel t % TOK and takes 4 consecutive channels per step (one 16-byte read of its
     * staged row: a quarter warp reads 8 rows 528 bytes apart, no conflict); a warp stores 32 consecutive pixels of
     * one channel (64 bytes, whole sectors) per instruction. Four steps at a time: their reads and bias loads issue
     * first, then 16 activations in flight per thread (as the pairs keep), where two steps left a fused SiLU's
     * latency exposed (+5-11 %). */
    template <int TOK, int CH, int PITCH, int KIND, typename OutT>
    __device__ __forceinline__ void store_quads(const float* epi, int ctid, int m0, int n0, const gemm::GemmArgs& args,
                                                OutT* out) const {
        constexpr int kThreads = gemm::kWsConsumers * 128;
        constexpr int kStep = 4 * (kThreads / TOK), kBatch = 4;  // channels between a thread's steps; steps at a time
        static_assert(kThreads % TOK == 0 && PITCH % 4 == 0 && CH % (kBatch * kStep) == 0, "a thread keeps one pixel");
        const int r = ctid % TOK, m = m0 + r;
        if (m >= args.m) return;
        const int b = m / out_pixels, pix = m - b * out_pixels;
        OutT* dst = out + size_t(b) * args.n * out_pixels + pix;
        const OutT* bias = static_cast<const OutT*>(args.bias);
        for (int c0 = 4 * (ctid / TOK); c0 < CH && n0 + c0 < args.n; c0 += kBatch * kStep) {
            float v[kBatch][4];
#pragma unroll
            for (int s = 0; s < kBatch; ++s) {
                const float4 f = *reinterpret_cast<const float4*>(epi + r * PITCH + c0 + s * kStep);
                v[s][0] = f.x;
                v[s][1] = f.y;
                v[s][2] = f.z;
                v[s][3] = f.w;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int n = n0 + c0 + s * kStep + e;
                    if (bias != nullptr && n < args.n) v[s][e] += float(bias[n]);
                }
            }
#pragma unroll
            for (int s = 0; s < kBatch; ++s) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int n = n0 + c0 + s * kStep + e;
                    if (n < args.n) dst[size_t(n) * out_pixels] = OutT(apply_epilogue_kind<KIND>(v[s][e], args.ep));
                }
            }
        }
    }

    /* Tactic conv_wgmma_scalar: thread t keeps pixel t % TOK and takes every (256 / TOK)-th channel, one output per
     * iteration (a warp reads 32 rows of one staged column: 4-way bank conflicts). */
    template <int TOK, int CH, int PITCH, int KIND, typename OutT>
    __device__ __forceinline__ void store_scalar(const float* epi, int ctid, int m0, int n0,
                                                 const gemm::GemmArgs& args, OutT* out) const {
        constexpr int kThreads = gemm::kWsConsumers * 128;
        static_assert(kThreads % TOK == 0, "a thread keeps one pixel");
        const int r = ctid % TOK, m = m0 + r;
        if (m >= args.m) return;
        const int b = m / out_pixels, pix = m - b * out_pixels;
        OutT* dst = out + size_t(b) * args.n * out_pixels + pix;
        const OutT* bias = static_cast<const OutT*>(args.bias);
        for (int c = ctid / TOK; c < CH && n0 + c < args.n; c += kThreads / TOK) {
            float v = epi[r * PITCH + c];
            if (bias != nullptr) v += float(bias[n0 + c]);
            dst[size_t(n0 + c) * out_pixels] = OutT(apply_epilogue_kind<KIND>(v, args.ep));
        }
    }
};

/* The token tiles (all 128 output channels per CTA): 64 pixels in clusters of 2 CTAs along N sharing the activation
 * tile by multicast (2 CTAs per SM), 128 and 256 pixels (1 CTA per SM). */
struct TileShape {
    int tok, cluster, stages;
};
constexpr TileShape kTiles[] = {{64, 2, 8}, {128, 1, 6}, {256, 1, 5}};
constexpr int kNumTiles = sizeof(kTiles) / sizeof(kTiles[0]);
constexpr int kChannels = 128;  // output channels per CTA

/* One launch of the kernel: tile index into kTiles, CTAs, its arguments. */
struct Launch {
    int tile;
    bool programmatic;  // a programmatic dependent of the transpose / clear_kernel launched before it
    int ctas;
    gemm::GemmArgs args;
    gemm::WsSchedule sched;
    CUtensorMap tmap_x, tmap_w;
    ConvIo io;
};

#ifdef TRT_WOQ_CONV_WGMMA_INSTANCES
template <int TOK, int CLUSTER, int STAGES, int BITS, typename T>
trt_woq_status launch_shape(const Launch& l, cudaStream_t stream) {
    // Every plan runs on the two-piece (stream-K) kernel: whole tiles take one piece.
    auto kernel = gemm::gemm_wgmma_ws_kernel<TOK, 1, STAGES, BITS, T, CLUSTER, 2, 1, ConvIo>;
    constexpr int smem = gemm::ws_geometry(TOK, kChannels, STAGES, BITS).smem_bytes;
    static const cudaError_t opt_in = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (opt_in != cudaSuccess) return record_cuda_error(opt_in);
    // tmap_w again for the kernel's FP6 map (unused by INT weights).
    return launch_ex(kernel, dim3(l.ctas), dim3(gemm::ws_threads(TOK)), smem, CLUSTER, l.programmatic, stream, l.args,
                     l.sched, l.tmap_x, l.tmap_w, l.tmap_w, l.io);
}

template <int BITS, typename T>
trt_woq_status launch_bits_type(const Launch& l, cudaStream_t stream) {
    static_assert(kNumTiles == 3, "one case per tile");
    switch (l.tile) {
        case 0: return launch_shape<kTiles[0].tok, kTiles[0].cluster, kTiles[0].stages, BITS, T>(l, stream);
        case 1: return launch_shape<kTiles[1].tok, kTiles[1].cluster, kTiles[1].stages, BITS, T>(l, stream);
        case 2: return launch_shape<kTiles[2].tok, kTiles[2].cluster, kTiles[2].stages, BITS, T>(l, stream);
        default: return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
}
#endif

/* The instances, one file per (weight format, activation type): wgmma_i4_f16.cu etc., compiled in parallel. */
trt_woq_status launch_i4_f16(const Launch& l, cudaStream_t stream);
trt_woq_status launch_i4_bf16(const Launch& l, cudaStream_t stream);
trt_woq_status launch_i8_f16(const Launch& l, cudaStream_t stream);
trt_woq_status launch_i8_bf16(const Launch& l, cudaStream_t stream);

}  // namespace conv_wgmma
}  // namespace trt_woq
