/*
 * Warp-specialized small-batch GEMV (M = 1 .. 64, SM90a) for layout 1: one producer warp streams whole packed rows
 * into shared memory with 1D bulk copies (cp.async.bulk, completion counted on an mbarrier), consumer warps convert
 * and multiply on mma.sync m16n8k16 as gemv_kernel.cuh does (chunk_pair: the same conversion, folded INT4
 * correction and scale modes).
 *
 * Why: the per-warp cp.async pipelines of gemv_kernel.cuh spend one copy instruction, its address arithmetic and a
 * wait per 16 bytes of weights in every lane, and at M > 8 each warp copies its own 16 activation rows (twice its
 * weight bytes per chunk). Here the consumers' instruction stream is only shared-memory loads, conversion and mma;
 * the bytes in flight are the ring's (stages x 16 KB per CTA) rather than what each warp's registers and waits allow;
 * and one activation tile per stage serves every consumer warp, so M = 16 costs little more than M = 1 (one converted
 * A fragment feeds both 8-row column tiles). M = 17 .. 64 (row copies): MT = 32 / 64 rows per stage, each converted
 * fragment feeding 4 / 8 column tiles (the "wide" path below).
 *
 * Work split
 *   grid    = (nsplit, tiles): a CTA owns kWsChannels = 128 output channels (4 consumer warps x 32) and K range
 *             `split` of nsplit; nsplit > 1 CTAs form a thread-block cluster and add their sums through distributed
 *             shared memory (no workspace, no second launch).
 *   stage   = ws_stage_k k (256 INT4, 128 INT8) of the CTA's packed rows (32 rows of 4 INT4 channels or 64 rows of 2
 *             INT8 channels, 512 or 256 contiguous bytes each: one bulk copy per row, 16 KB per stage) and of the M
 *             activation rows. Rows past N and k past K are not copied: their stale bytes convert to finite values
 *             that meet zero activations and zero scales (lanes whose block lies past K skip their loads) or land in
 *             outputs that are never stored.
 *   producer = warp 4: lane l copies packed rows l, l + 32, ... and activation row l of each stage after the stage's
 *             "empty" barrier says the 4 consumer warps are done with it; the "full" barrier's transaction count
 *             completes the stage.
 *   sum warp = warp 5 (ws_sum_warp: INT4 folded conversion, MT = 16, row copies): the stage's row sums once per CTA
 *             (mma_corr), stored in the stage behind a "sums" barrier that the consumers wait on too.
 *   consumer = warp w: channels 32 w .. 32 w + 31 (tile pairs (0, 1), (2, 3)); per chunk of 128 k (INT4) or 64 k
 *             (INT8) lane (g, q) reads the same 16-byte fragment words gemv_kernel.cuh reads, from the row image.
 *   shared-memory banks: a stage's packed rows are 512 / 256 B apart (a multiple of 128), so a warp's 16-byte loads
 *             land in 8 distinct 16-byte bank groups per 8 lanes, as in global memory; activation rows are padded
 *             by 16 B so that the 8 rows g read at once start in different bank groups.
 * Scales: grouped scales (and zero points) are read by the consumer lanes from global memory one stage ahead, into
 * registers; per-channel scales and the bias once per CTA into shared memory, before the pipeline's first wait.
 */
#ifndef TRT_WOQ_GEMV_WS_CUH
#define TRT_WOQ_GEMV_WS_CUH

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include "gemm/gemm_wgmma_ws.cuh"  // mbarrier and TMA wrappers (TRT_WOQ_WGMMA: sm_90a), CUtensorMap
#include "gemv/gemv_kernel.cuh"

namespace trt_woq {
namespace gemv {

constexpr int kWsStageWeightBytes = 16384;  // the CTA's packed rows per stage (2 bytes per k and packed row)
constexpr int kWsHeaderBytes = 2048;  // full / empty barriers (256 B), per-channel scales and bias (2 x 128 x 4 B),
                                      // the sum warp's barriers (128 B), aligned

/* k per stage: 256 (INT4: 32 packed rows of 4 channels) or 128 (INT8: 64 rows of 2), 16 KB of weights either way. */
__host__ __device__ constexpr int ws_stage_k(int bits) {
    return bits == 8 ? 128 : 256;
}

/* Whether a CTA has the sum warp: the folded INT4 conversion's row sums computed once per stage for all consumer
 * warps, at MT = 16 with row copies (measured: at M <= 8 the extra warp cost more than the 8 mma per chunk it saves
 * each consumer; M > 16 converts in full). */
__host__ __device__ constexpr bool ws_sum_warp(int bits, int mode, int mt, bool tma) {
    return bits == 4 && mode != kFineGroup && mt == 16 && !tma;
}

/* Warps of a CTA: the consumers, the producer (warp kWsConsumerWarps), the sum warp (the next one) if any. */
__host__ __device__ constexpr int ws_warps(bool sum) {
    return kWsConsumerWarps + 1 + (sum ? 1 : 0);
}

/* Offset of a stage's row sums (the sum warp's output): after the packed rows (FP6: its 4-bit words, then its 2-bit
 * words: 32 rows x 256 B) and the activations of ws_stage_k k. Row copies (TMA = false): m rows, each padded by
 * 16 B. Tensor copies: boxes of 64 k x MT rows (MT x 128 B, 128-byte swizzle), a multiple of the swizzle's 1024-byte
 * period. */
__host__ __device__ constexpr uint32_t ws_sum_offset(int bits, int m, int mt, bool tma) {
    return tma ? kWsStageWeightBytes + (bits == 6 ? kWsStageWeightBytes / 2 : 0) + ws_stage_k(bits) / 64 * mt * 128
               : (kWsStageWeightBytes + static_cast<uint32_t>(m) * (ws_stage_k(bits) * 2 + 16) + 127) / 128 * 128;
}

/* Bytes of one stage: ws_sum_offset, then (sum warp, row copies) 64 B of row sums per chunk and column tile of 8
 * rows. */
__host__ __device__ constexpr uint32_t ws_stage_bytes(int bits, int m, int mt, bool tma, bool sums = false) {
    return ws_sum_offset(bits, m, mt, tma) + (sums ? ws_stage_k(bits) / 128 * (mt / 8) * 64 : 0);
}

struct WsArgs {
    int stages;  // ring depth
    int chunks_per_split;
};

#ifdef TRT_WOQ_WGMMA
/* 1D bulk copy global -> this CTA's shared memory, completing `bytes` of the transaction count of mbarrier `bar`. */
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}
#endif

/* TMA: the producer's lane 0 loads a stage with two-dimensional tensor copies (tmap_w: the CTA's packed rows as one
 * box; tmap_x: the activations, one swizzled box per 64 k; FP6, TMA only: tmap_w2, the rows' 2-bit words) instead of
 * one bulk copy per row. FP6 (layout 2) takes INT4's geometry for its 4-bit words (docs/layouts.md).
 * Where ws_sum_warp says, the sum warp computes the folded conversion's row sums of each stage once (mma_corr into
 * the stage's sum area, then its "sums" barrier) instead of every consumer warp per chunk. */
template <typename T, int BITS, int MODE, bool ZEROS, int MT, bool TMA>
__global__ void __launch_bounds__(ws_warps(ws_sum_warp(BITS, MODE, MT, TMA)) * 32, MT > 32 ? 2 : 0)
    gemv_kernel_ws(Args<T> a, WsArgs ws, const __grid_constant__ CUtensorMap tmap_w,
                   const __grid_constant__ CUtensorMap tmap_x, const __grid_constant__ CUtensorMap tmap_w2) {
#ifdef TRT_WOQ_WGMMA
    using gemm::mbar_arrive;
    using gemm::mbar_arrive_expect_tx;
    using gemm::mbar_init;
    using gemm::mbar_wait;
    constexpr int I = BITS == 8 ? 2 : 4;        // channels per packed row
    constexpr int KC = BITS == 8 ? 64 : 128;    // k per chunk
    constexpr int BK = KC / 4;                  // k per lane block
    constexpr int kVec = BK * 2 / 16;           // 16-byte activation vectors per lane block and row
    constexpr int kStride = 2 * KC;             // packed-row bytes per chunk
    constexpr int kStageK = ws_stage_k(BITS);
    constexpr int kChunks = kStageK / KC;       // chunks per stage
    constexpr int kRows = kWsChannels / I;      // packed rows per CTA
    constexpr int kRowBytes = 2 * kStageK;      // a packed row's bytes per stage
    constexpr int kXRow = kStageK * 2 + 16;     // padded activation row
    static_assert(kRows * kRowBytes == kWsStageWeightBytes, "stage geometry");
    constexpr int NT = kWsWarpChannels / 8;
    constexpr int NB = MT / 8;
    constexpr bool GROUPED = MODE != kPerChannel;
    constexpr bool FOLD = BITS == 4 && MODE != kFineGroup;
    constexpr bool kTwoAcc = !FOLD && MODE != kChunkGroup;
    constexpr bool kFp6 = BITS == 6;
    static_assert(TMA || !kFp6, "FP6 stages are tensor copies");
    constexpr bool kWide = NB > 2;  // M > 16: row copies, the converted fragments kept across column tiles
    static_assert(!kWide || !TMA, "M > 16 takes the row copies");
    constexpr uint32_t kXOff = kWsStageWeightBytes + (kFp6 ? kWsStageWeightBytes / 2 : 0);  // activations in a stage
    constexpr bool kSum = ws_sum_warp(BITS, MODE, MT, TMA);

    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t base = smem_addr(smem);
    const uint32_t full0 = base, empty0 = base + 128, sums0 = base + 1280;  // 16 barriers each at most
    float* chan_scale = reinterpret_cast<float*>(smem + 256);
    float* chan_bias = chan_scale + kWsChannels;
    const uint32_t ring = (base + kWsHeaderBytes + 1023) / 1024 * 1024;  // the swizzle's period
    const int m = a.m;
    const uint32_t stage_bytes = ws_stage_bytes(BITS, m, MT, TMA, kSum);
    const uint32_t sum_off = ws_sum_offset(BITS, m, MT, TMA);
    const int stages = ws.stages;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int cta_base = blockIdx.y * kWsChannels;
    const int nchunks = (a.k + KC - 1) / KC;
    const int c_begin = blockIdx.x * ws.chunks_per_split;
    const int c_end = min(nchunks, c_begin + ws.chunks_per_split);
    const int k_begin = c_begin * KC;
    const int k_end = min(a.k, c_end * KC);
    const int nstages = (c_end - c_begin + kChunks - 1) / kChunks;

    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, kWsConsumerWarps);
            if (kSum) mbar_init(sums0 + 8 * s, 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    // Tile pair p's column tile b accumulates in acc[p * kNB2 + b] (MT <= 16: acc[j + b] for pair (j, j + 1)).
    constexpr int kNB2 = NB > 2 ? NB : 2;
    constexpr int kAcc = NT / 2 * kNB2;
    float acc[kAcc][4];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    // Activation row r, vector v (8 k) of lane block q of chunk ch in the stage whose activations start at xst: padded
    // rows, or (TMA) box kk / 64, row r, 16-byte chunk (kk % 64) / 8 ^ r % 8.
    auto x_at = [&](uint32_t xst, int ch, int q, int r, int v) {
        const int kk = ch * KC + q * BK + 8 * v;
        return xst + (TMA ? (kk >> 6) * MT * 128 + r * 128 + ((((kk & 63) >> 3) ^ (r & 7)) << 4) : r * kXRow + kk * 2);
    };
    // The B tiles of chunk ch for lane (g, q) (MT <= 16): rows g (xa) and g + 8 (xb), zeros past M and (!kv) K.
    auto load_x = [&](uint32_t xst, int ch, int g, int q, bool kv, uint4* xa, uint4* xb) {
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
            xa[v] = g < m && kv ? lds128(x_at(xst, ch, q, g, v)) : make_uint4(0, 0, 0, 0);
            if (MT == 16) xb[v] = g + 8 < m && kv ? lds128(x_at(xst, ch, q, g + 8, v)) : make_uint4(0, 0, 0, 0);
        }
    };
    // A warp's release of its reads of a stage on barrier `bar`: the stage's next writer is the producer's copies, in
    // the async proxy, so after __syncwarp (the warp's reads before lane 0's) lane 0 orders them against that proxy,
    // then arrives.
    auto warp_release = [&](uint32_t bar) {
        __syncwarp();
        if (lane == 0) {
            gemm::fence_proxy_async();
            mbar_arrive(bar);
        }
    };
    if (warp == kWsConsumerWarps) {
        // Producer. Packed rows past N are not copied (N % I == 0: a row is wholly inside or past N).
        const int rows = min(kRows, (a.n - cta_base) / I);
        const unsigned char* wrow = a.w + static_cast<size_t>(cta_base / I) * 2 * a.k;
        for (int it = 0; it < nstages; ++it) {
            const int s = it % stages;
            if (it >= stages) mbar_wait(empty0 + 8 * s, ((it / stages) - 1) & 1);
            const int k0 = k_begin + it * kStageK;
            const uint32_t kb = static_cast<uint32_t>(min(kStageK, k_end - k0));
            const uint32_t st = ring + s * stage_bytes;
            if constexpr (TMA) {  // whole boxes arrive (zero-filled past N, M and K)
                if (lane == 0) {
                    mbar_arrive_expect_tx(full0 + 8 * s, stage_bytes);
                    gemm::tma_load_2d(st, &tmap_w, k0 / 2, cta_base / I, full0 + 8 * s);
                    if (kFp6) gemm::tma_load_2d(st + kWsStageWeightBytes, &tmap_w2, k0 / 4, cta_base / I, full0 + 8 * s);
                    for (int b = 0; b < kStageK / 64; ++b) {
                        gemm::tma_load_2d(st + kXOff + b * MT * 128, &tmap_x, k0 + 64 * b, 0, full0 + 8 * s);
                    }
                }
                continue;
            }
            if (lane == 0) mbar_arrive_expect_tx(full0 + 8 * s, (rows * 2 + m * 2) * kb);
            __syncwarp();
            for (int r = lane; r < rows; r += 32) {
                bulk_copy(st + r * kRowBytes, wrow + static_cast<size_t>(r) * 2 * a.k + 2 * k0, 2 * kb, full0 + 8 * s);
            }
            for (int r = lane; r < m; r += 32) {
                bulk_copy(st + kXOff + r * kXRow, a.x + static_cast<size_t>(r) * a.k + k0, 2 * kb,
                          full0 + 8 * s);
            }
        }
    } else if (warp > kWsConsumerWarps) {
        // The sum warp: per stage and chunk, the row sums of each column tile (mma_corr, as a consumer would run it;
        // they depend on q only, so lanes g = 0 store them: 64 B per chunk and column tile), then the "sums" barrier.
        // The consumers arrive on "empty" only after waiting for it, so the stage outlives these reads.
        if constexpr (kSum) {
            const int g = lane >> 2;
            const int q = lane & 3;
            for (int it = 0; it < nstages; ++it) {
                const int s = it % stages;
                mbar_wait(full0 + 8 * s, (it / stages) & 1);
                const uint32_t st = ring + s * stage_bytes;
#pragma unroll
                for (int ch = 0; ch < kChunks; ++ch) {
                    const int kc0 = k_begin + it * kStageK + ch * KC;
                    if (kc0 >= k_end) break;
                    uint4 xa[kVec], xb[MT == 16 ? kVec : 1];
                    load_x(st + kXOff, ch, g, q, kc0 + q * BK < k_end, xa, xb);
                    store_corr<T, NB>(st + sum_off + ch * NB * 64, g, q, xa, xb);
                }
                warp_release(sums0 + 8 * s);
            }
        }
    } else {
        // Consumer warp `warp`: per-channel scales and bias of the CTA first (read after the loop).
        for (int t = threadIdx.x; t < kWsChannels; t += kWsConsumerWarps * 32) {
            const bool valid = cta_base + t < a.n;
            chan_scale[t] = !GROUPED && valid ? to_float(a.scales[cta_base + t]) * (kFp6 ? fp6::kBiasScale : 1.0f) : 0.0f;
            chan_bias[t] = a.bias != nullptr && valid ? to_float(a.bias[cta_base + t]) : 0.0f;
        }
        const int g = lane >> 2;
        const int q = lane & 3;
        // This lane's channel of tile j, its byte offset in a stage's packed rows, its validity.
        int chan[NT];
        uint32_t woff[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int c = warp * kWsWarpChannels + 8 * j + g;  // in the CTA
            chan[j] = cta_base + c;
            const int ci = c % I;
            woff[j] = (c / I) * kRowBytes + (BITS != 8 ? ci * 32 + (q >> 1) * 128 + (q & 1) * 16 : ci * 64 + q * 16);
        }
        // Per-channel zero points are constant along K.
        T zpc[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            zpc[j] = (!GROUPED && ZEROS && chan[j] < a.n) ? a.zeros[chan[j]] : from_float<T>(0.0f);
        }
        // Grouped scales / zeros of a stage's chunks for this lane (chunk groups: the chunk's first k; fine groups:
        // the lane block's), 0 where the lane block lies past the split or the channel past N.
        constexpr int kSRegs = GROUPED ? kChunks * NT : 1;
        T sc[kSRegs], zc[kSRegs], sc_next[kSRegs], zc_next[kSRegs];
        auto load_scales = [&](int it, T* s_out, T* z_out) {
#pragma unroll
            for (int ch = 0; ch < kChunks; ++ch) {
                const int kl = k_begin + it * kStageK + ch * KC + (MODE == kFineGroup ? q * BK : 0);
                const size_t row = static_cast<size_t>(min(kl, a.k - 1) >> a.group_shift) * a.n;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const bool valid = kl < k_end && chan[j] < a.n;
                    s_out[ch * NT + j] = valid ? a.scales[row + chan[j]] : from_float<T>(0.0f);
                    if (ZEROS) z_out[ch * NT + j] = valid ? a.zeros[row + chan[j]] : from_float<T>(0.0f);
                }
            }
        };
        if constexpr (GROUPED) load_scales(0, sc_next, zc_next);
        constexpr bool kAcc2 = kTwoAcc && !kWide;  // wide: every chunk's sums added (acc2 would double acc)
        float acc2[kAcc2 ? NT : 1][4];
#pragma unroll
        for (int j = 0; j < (kAcc2 ? NT : 1); ++j) acc2[j][0] = acc2[j][1] = acc2[j][2] = acc2[j][3] = 0.0f;

        for (int it = 0; it < nstages; ++it) {
            const int s = it % stages;
            if constexpr (GROUPED) {
#pragma unroll
                for (int i = 0; i < kSRegs; ++i) {
                    sc[i] = sc_next[i];
                    if (ZEROS) zc[i] = zc_next[i];
                }
                if (it + 1 < nstages) load_scales(it + 1, sc_next, zc_next);
            }
            mbar_wait(full0 + 8 * s, (it / stages) & 1);
            if constexpr (kSum) mbar_wait(sums0 + 8 * s, (it / stages) & 1);
            const uint32_t st = ring + s * stage_bytes;
            const uint32_t xst = st + kXOff;
#pragma unroll
            for (int ch = 0; ch < kChunks; ++ch) {
                const int kc0 = k_begin + it * kStageK + ch * KC;
                if (kc0 >= k_end) break;
                const bool kv = kc0 + q * BK < k_end;  // K % 64 == 0: a lane block is wholly inside or past K
                // Tile pair (j, j + 1)'s zero points (raw) and chunk scales of this chunk.
                auto pair_params = [&](int j, T& za, T& zb, T& sa, T& sb) {
                    const T zero = from_float<T>(0.0f);
                    const int at = ch * NT + j;
                    za = !ZEROS ? zero : GROUPED ? zc[at] : zpc[j];
                    zb = !ZEROS ? zero : GROUPED ? zc[at + 1] : zpc[j + 1];
                    sa = GROUPED ? sc[at] : zero;
                    sb = GROUPED ? sc[at + 1] : zero;
                };
                if constexpr (kWide) {
                    // The tile pairs converted once (in full: with 4 to 8 column tiles per fragment the folded
                    // conversion's saving is smaller than its per-column-tile correction), then each column tile of 8
                    // rows loaded once per pass and fed to the pass's pairs: one pass over both pairs (MT = 32), or
                    // one pass per pair (MT = 64: both pairs' fragments and 64 accumulators exceed two CTAs'
                    // registers; the activations are read twice instead).
                    constexpr int kPasses = NB > 4 ? NT / 2 : 1;
                    constexpr int kPP = NT / 2 / kPasses;  // tile pairs per pass
#pragma unroll
                    for (int pass = 0; pass < kPasses; ++pass) {
                        uint32_t af[kPP][2][BITS == 8 ? 2 : 4][4];
                        float zf[2 * kPP];
                        T sab[2 * kPP];
#pragma unroll
                        for (int pp = 0; pp < kPP; ++pp) {
                            const int j = 2 * (pass * kPP + pp);
                            const uint4 w0 = lds128(st + woff[j] + ch * kStride);
                            const uint4 w1 = lds128(st + woff[j + 1] + ch * kStride);
                            using P = typename Pair<T>::type;
                            T za, zb;
                            pair_params(j, za, zb, sab[2 * pp], sab[2 * pp + 1]);
                            zf[2 * pp] = to_float(za) - static_cast<float>(1 << (BITS - 1));
                            zf[2 * pp + 1] = to_float(zb) - static_cast<float>(1 << (BITS - 1));
                            const T za2 = from_float<T>(zf[2 * pp]), zb2 = from_float<T>(zf[2 * pp + 1]);
                            const uint2 none2 = make_uint2(0, 0);  // FP6's 2-bit words: not served here
                            convert_pair2<T, BITS, MODE == kFineGroup, ZEROS, false>(
                                af[pp], w0, w1, none2, none2, P(za2, za2), P(zb2, zb2), P(sab[2 * pp], sab[2 * pp]),
                                P(sab[2 * pp + 1], sab[2 * pp + 1]));
                        }
#pragma unroll
                        for (int b = 0; b < NB; ++b) {
                            if (8 * b >= m) break;  // warp-uniform: no rows left
                            uint4 xv[kVec];
#pragma unroll
                            for (int v = 0; v < kVec; ++v) {
                                xv[v] = 8 * b + g < m && kv ? lds128(x_at(xst, ch, q, 8 * b + g, v))
                                                            : make_uint4(0, 0, 0, 0);
                            }
                            const float none[4] = {};
#pragma unroll
                            for (int pp = 0; pp < kPP; ++pp) {
                                float t2[2][4] = {};
                                mma_tile2<T, BITS>(t2, af[pp], xv);
                                float(&d)[4] = acc[(pass * kPP + pp) * kNB2 + b];
                                finish_tile<T, BITS, MODE, ZEROS, false, false>(d, d, t2, none, zf[2 * pp],
                                                                                zf[2 * pp + 1], sab[2 * pp],
                                                                                sab[2 * pp + 1]);
                            }
                        }
                    }
                } else {
                    uint4 xa[kVec];
                    uint4 xb[MT == 16 ? kVec : 1];
                    load_x(xst, ch, g, q, kv, xa, xb);
                    float corr[NB][4] = {};
                    if constexpr (kSum) {  // the sum warp's, for rows 2q, 2q + 1 of each column tile
                        load_corr<NB>(corr, st + sum_off + ch * NB * 64, q);
                    } else if constexpr (FOLD) {
                        mma_corr<T>(corr[0], xa);
                        if constexpr (NB == 2) mma_corr<T>(corr[1], xb);
                    }
#pragma unroll
                    for (int j = 0; j < NT; j += 2) {
                        const uint4 w0 = lds128(st + woff[j] + ch * kStride);
                        const uint4 w1 = lds128(st + woff[j + 1] + ch * kStride);
                        // FP6: the lane's 2-bit words sit at half its 4-bit words' offset in the 2-bit rows.
                        const uint32_t l_at = st + kWsStageWeightBytes + ch * kStride / 2;
                        const uint2 l0 = kFp6 ? lds64(l_at + woff[j] / 2) : make_uint2(0, 0);
                        const uint2 l1 = kFp6 ? lds64(l_at + woff[j + 1] / 2) : make_uint2(0, 0);
                        T za, zb, sa, sb;
                        pair_params(j, za, zb, sa, sb);
                        chunk_pair<T, BITS, MODE, ZEROS, NB>(acc + j, acc2 + (kAcc2 ? j : 0), w0, w1, l0, l1, xa, xb,
                                                             corr, za, zb, sa, sb);
                    }
                }
            }
            warp_release(empty0 + 8 * s);
        }
        if constexpr (kTwoAcc && !kWide) {
#pragma unroll
            for (int j = 0; j < NT; ++j) {
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[j][i] += acc2[j][i];
            }
        }
    }
    __syncthreads();  // every consumer is done with the ring (every copy landed: each stage was waited for)
    // The CTA's sums fin[row][channel] (MT x 128 floats) over the ring. Pair (j, j + 1), column tile b: c0/c1 =
    // channel g of tile j, rows 8b + 2q, 8b + 2q + 1; c2/c3 the same for tile j + 1.
    float* fin = reinterpret_cast<float*>(smem + kWsHeaderBytes);
    if (warp < kWsConsumerWarps) {
        const int g = lane >> 2;
        const int q = lane & 3;
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const int c = warp * kWsWarpChannels + 8 * j + g;
                const int r = 8 * b + 2 * q;
                const float* t = acc[j / 2 * kNB2 + b];
                fin[r * kWsChannels + c] = t[0];
                fin[(r + 1) * kWsChannels + c] = t[1];
                fin[r * kWsChannels + c + 8] = t[2];
                fin[(r + 1) * kWsChannels + c + 8] = t[3];
            }
        }
    }
    const int nsplit = gridDim.x;
    constexpr int kOutputs = MT * kWsChannels;
    const int outs = min(m, MT) * kWsChannels;
    auto store = [&](int o, float sum) {
        const int row = o / kWsChannels, c = o % kWsChannels;
        if (cta_base + c >= a.n) return;
        if (!GROUPED) sum *= chan_scale[c];
        sum += chan_bias[c];
        a.y[static_cast<size_t>(row) * a.n + cta_base + c] = from_float<T>(apply_epilogue(sum, a.ep));
    };
    static_assert(kOutputs * 4 <= 2 * kWsStageWeightBytes, "the sums fit in the ring (two stages at least)");
    namespace cg = cooperative_groups;
    if (nsplit > 1) {
        // Rank r of the cluster adds slice r of the outputs over every CTA's fin and stores it.
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();
        const int rank = static_cast<int>(cluster.block_rank());
        for (int o = outs * rank / nsplit + threadIdx.x; o < outs * (rank + 1) / nsplit; o += blockDim.x) {
            float sum = 0.0f;
            for (int r = 0; r < nsplit; ++r) sum += cluster.map_shared_rank(fin, r)[o];
            store(o, sum);
        }
        cluster.sync();  // every CTA's shared memory stays alive until the others have read it
        return;
    }
    __syncthreads();
    for (int o = threadIdx.x; o < outs; o += blockDim.x) store(o, fin[o]);
#else
    __trap();  // built without sm_90a code: fail the launch rather than leave the output unwritten
#endif
}

/* A tensor map of the row-major [rows, inner] tensor at `base` (elements of elem_bytes, rows pitch_elems apart), box
 * [box_rows, box_inner], elements out of bounds read as zero; the driver's encoder is reached through the runtime (the library
 * does not link libcuda). False when the encoder is missing or refuses. */
inline bool tensor_map_2d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base, int64_t inner,
                          int64_t rows, int64_t pitch_elems, uint32_t box_inner, uint32_t box_rows,
                          CUtensorMapSwizzle swizzle) {
    static const auto encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                                 cudaEnableDefault, &found);
        return err == cudaSuccess && found == cudaDriverEntryPointSuccess
                   ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
                   : nullptr;
    }();
    const cuuint64_t shape[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows)};
    const cuuint64_t pitch[1] = {static_cast<cuuint64_t>(pitch_elems) * elem_bytes};
    const cuuint32_t box[2] = {box_inner, box_rows}, unit[2] = {1, 1};
    return encode != nullptr &&
           encode(map, type, 2, const_cast<void*>(base), shape, pitch, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Grid: CTAs of 128 channels; K split over a cluster of nsplit <= 8 CTAs where that fills the CTA slots better (the
 * fraction of the slots of the waves used; the slots of clusters as the occupancy query counts them, since a cluster
 * must fit in one GPC), keeping at least 6 stages per split; ring depth: the stages that fit in the SM's shared memory
 * shared by the CTAs its registers allow (at most two), 2 .. 16. */
template <typename T, int BITS, int MODE, bool ZEROS, int MT, bool TMA>
trt_woq_status launch_ws_kernel(const trt_woq_linear_params* p, int sms, int smem_per_sm, cudaStream_t stream) {
    const Args<T> a = args_of<T>(p);
    auto kernel = gemv_kernel_ws<T, BITS, MODE, ZEROS, MT, TMA>;
    constexpr bool kSum = ws_sum_warp(BITS, MODE, MT, TMA);
    const dim3 block(ws_warps(kSum) * 32);
    CUtensorMap tmap_w = {}, tmap_x = {}, tmap_w2 = {};
    if (TMA) {
        // Packed rows [N / I, K / 2 words], box [128 / I rows, ws_stage_k / 2 words], unswizzled (the row images the
        // row copies make); FP6 rows are 3 K / 4 words, their 2-bit words [N / 4, K / 4] after the 4-bit ones;
        // activations [M, K], box [MT rows, 64 k], 128-byte swizzle. Past N, M, K: zeros.
        constexpr int I = BITS == 8 ? 2 : 4;
        const int64_t pitch = BITS == 6 ? p->k / 4 * 3 : p->k / 2;
        const unsigned char* w = static_cast<const unsigned char*>(p->packed_weight);
        if (!tensor_map_2d(&tmap_w, CU_TENSOR_MAP_DATA_TYPE_INT32, 4, w, p->k / 2, p->n / I, pitch,
                           ws_stage_k(BITS) / 2, kWsChannels / I, CU_TENSOR_MAP_SWIZZLE_NONE) ||
            !tensor_map_2d(&tmap_x, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, p->activation, p->k, p->m, p->k, 64, MT,
                           CU_TENSOR_MAP_SWIZZLE_128B) ||
            (BITS == 6 && !tensor_map_2d(&tmap_w2, CU_TENSOR_MAP_DATA_TYPE_INT32, 4, w + 2 * p->k, p->k / 4, p->n / I,
                                         pitch, ws_stage_k(BITS) / 4, kWsChannels / I, CU_TENSOR_MAP_SWIZZLE_NONE))) {
            return record_cuda_error(cudaErrorInvalidValue);
        }
    }
    const size_t stage = ws_stage_bytes(BITS, static_cast<int>(p->m), MT, TMA, kSum);
    // Two CTAs per SM, or one where the registers allow only one (MT = 64: ~216 per thread; capping them at two
    // CTAs' share spills): the SM's shared memory shared by those CTAs, less the per-CTA reserve (1 KB), the header
    // and (TMA) the alignment of the ring to 1024 bytes.
    int by_regs = 0;
    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&by_regs, kernel, block.x, 0);
    if (err != cudaSuccess) return record_cuda_error(err);
    const size_t fixed = kWsHeaderBytes + (TMA ? 1024 : 0);
    const size_t budget = static_cast<size_t>(smem_per_sm) / std::min(2, std::max(1, by_regs)) - 1024 - fixed;
    WsArgs ws;
    ws.stages = static_cast<int>(std::max<size_t>(2, std::min<size_t>(16, budget / stage)));
    const size_t smem = fixed + ws.stages * stage;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return record_cuda_error(err);
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block.x, smem);
    if (err != cudaSuccess) return record_cuda_error(err);
    const int64_t tiles = (p->n + kWsChannels - 1) / kWsChannels;
    const int64_t kc = BITS == 8 ? 64 : 128;
    const int64_t nchunks = (p->k + kc - 1) / kc;
    const int64_t min_chunks = 6 * ws_stage_k(BITS) / kc;  // stages per split at least
    int nsplit = 1;
    double best = -1.0;
    for (int s = 1; s <= 8; ++s) {
        if (s > 1 && nchunks < s * min_chunks) break;
        // CTAs resident at once: clusters of s CTAs must fit in one GPC, so ask for the clusters rather than per SM.
        int64_t slots = static_cast<int64_t>(std::max(per_sm, 1)) * sms;
        if (s > 1) {
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t config = cluster_config(dim3(s, static_cast<unsigned>(tiles)), block, smem, s,
                                                             stream, &attr);
            int clusters = 0;
            if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess || clusters == 0) {
                (void)cudaGetLastError();  // an unsupported cluster size: not a launch error
                continue;
            }
            slots = static_cast<int64_t>(clusters) * s;
        }
        const int64_t ctas = tiles * s;
        const int64_t waves = (ctas + slots - 1) / slots;
        const double fill = static_cast<double>(ctas) / static_cast<double>(waves * slots);
        if (fill > best + 0.02) {
            best = fill;
            nsplit = s;
        }
    }
    ws.chunks_per_split = static_cast<int>((nchunks + nsplit - 1) / nsplit);
    nsplit = static_cast<int>((nchunks + ws.chunks_per_split - 1) / ws.chunks_per_split);
    const dim3 grid(static_cast<unsigned>(nsplit), static_cast<unsigned>(tiles));
    return launch_in_clusters(kernel, grid, block, smem, static_cast<unsigned>(nsplit), stream, a, ws, tmap_w, tmap_x,
                              tmap_w2);
}

/* Activation rows per column-tile set: 8, 16, then (row copies) 32 and 64. */
template <typename T, int BITS, int MODE, bool ZEROS, bool TMA>
trt_woq_status launch_ws_mt(const trt_woq_linear_params* p, int sms, int smem_per_sm, cudaStream_t stream) {
    if constexpr (!TMA) {
        if (p->m > 32) return launch_ws_kernel<T, BITS, MODE, ZEROS, 64, TMA>(p, sms, smem_per_sm, stream);
        if (p->m > 16) return launch_ws_kernel<T, BITS, MODE, ZEROS, 32, TMA>(p, sms, smem_per_sm, stream);
    }
    if (p->m > 16) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    return p->m > 8 ? launch_ws_kernel<T, BITS, MODE, ZEROS, 16, TMA>(p, sms, smem_per_sm, stream)
                    : launch_ws_kernel<T, BITS, MODE, ZEROS, 8, TMA>(p, sms, smem_per_sm, stream);
}

template <typename T, int BITS, int MODE, bool TMA>
trt_woq_status launch_ws_zeros(const trt_woq_linear_params* p, int sms, int smem_per_sm, cudaStream_t stream) {
    if constexpr (BITS == 6) {  // FP6 has no zero points (supports() refuses them)
        return launch_ws_mt<T, BITS, MODE, false, TMA>(p, sms, smem_per_sm, stream);
    } else {
        return p->zeros != nullptr ? launch_ws_mt<T, BITS, MODE, true, TMA>(p, sms, smem_per_sm, stream)
                                   : launch_ws_mt<T, BITS, MODE, false, TMA>(p, sms, smem_per_sm, stream);
    }
}

template <typename T, int BITS, bool TMA>
trt_woq_status launch_ws_typed(const trt_woq_linear_params* p, int sms, int smem_per_sm, cudaStream_t stream) {
    constexpr int kc = BITS == 8 ? 64 : 128;
    if (p->group_size == -1) return launch_ws_zeros<T, BITS, kPerChannel, TMA>(p, sms, smem_per_sm, stream);
    if (p->group_size >= kc) return launch_ws_zeros<T, BITS, kChunkGroup, TMA>(p, sms, smem_per_sm, stream);
    return launch_ws_zeros<T, BITS, kFineGroup, TMA>(p, sms, smem_per_sm, stream);
}

template <int BITS>
trt_woq_status launch_ws(const trt_woq_linear_params* p, bool tma, int sms, int smem_per_sm, cudaStream_t stream) {
    const bool bf16 = p->act_type == TRT_WOQ_ACT_BF16;
    if (BITS == 6 || tma) {
        return bf16 ? launch_ws_typed<__nv_bfloat16, BITS, true>(p, sms, smem_per_sm, stream)
                    : launch_ws_typed<half, BITS, true>(p, sms, smem_per_sm, stream);
    }
    if constexpr (BITS != 6) {
        return bf16 ? launch_ws_typed<__nv_bfloat16, BITS, false>(p, sms, smem_per_sm, stream)
                    : launch_ws_typed<half, BITS, false>(p, sms, smem_per_sm, stream);
    }
    return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
}

}  // namespace gemv
}  // namespace trt_woq

#endif /* TRT_WOQ_GEMV_WS_CUH */
