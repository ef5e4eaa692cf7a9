/*
 * Small-batch weight-only GEMV (M = 1 .. 16) for layout v1 on mma.sync m16n8k16 with FP32 accumulation.
 *
 * Why tensor cores for a GEMV: at M = 16 every weight is used 16 times; FP32 FFMA at 16 FMA per weight would take
 * longer than streaming INT4 weights from HBM. One m16n8k16 does it at 1/16 of an instruction per weight and row, and
 * the layout already hands each lane its fragment words. Activation rows M .. MT-1 are zero (MT = 8 or 16 rows).
 *
 * Work split
 *   grid   = (nsplit, tiles). A CTA owns NT tiles of 8 output channels and the K range of its split; with nsplit > 1
 *            (SM90 only) the nsplit CTAs of one thread-block cluster add their sums through distributed shared memory.
 *   CTA    = `warps` warps splitting the CTA's K range in chunks (chunk c -> warp c % warps) of 128 k (INT4) or 64 k
 *            (INT8); at the end their FP32 partial sums meet in shared memory.
 *   warp   = for one chunk and one tile: lane t = 4 g + q fetches, with one 16-byte copy, block q (32 INT4 or 16 INT8
 *            consecutive packed positions) of channel g; the 32 lanes cover whole 128-byte lines.
 *   k order: mma only needs A and B to agree on which k a lane holds. Lane q feeds the mma k-slots 2q, 2q+1, 2q+8,
 *            2q+9 from word w of its own block, which step 2 of the layout made block elements 2w, 2w+1, 2w+8, 2w+9
 *            (+16 for INT4's second k16 step), so the activations of the lane's own block (pair p = component p % 4
 *            of 16-byte vector p / 4) are its B fragment: no shuffles.
 *
 * Memory pipeline: each lane copies its own weights, activations, scales and zeros of chunk i + STAGES - 1 into its
 * own shared-memory slots with cp.async (zero-filled out of range) while it computes chunk i; every lane reads back
 * only what it wrote, so the pipeline needs no barrier, only cp.async.wait_group. Bytes in flight per SM do not cost
 * registers.
 *
 * Scales: per-channel scales multiply the FP32 sum in the epilogue; group sizes >= the chunk (128 for INT4, 64 for
 * INT8) multiply a chunk's FP32 mma result (one group per chunk: the products are exact, one rounding per chunk);
 * smaller groups multiply the converted weights (HMUL2) before the mma. Zeros: q - (z - 2^(bits-1)), exact.
 *
 * Weights are the mma's A operand at every M: mma_pair2's k order feeds B straight from the
 * 16-byte activation loads, and INT4 without fine groups skips the conversion's subtractions (convert_word_biased4):
 * each chunk's FP32 sums are corrected with the activation row sums that mma_corr computes once per chunk for all
 * tiles (zero points too). MT = 16 adds a second B tile (rows 8..15) to each converted A fragment. The copies use
 * issue's loop-invariant addressing.
 */
#ifndef TRT_WOQ_GEMV_KERNEL_CUH
#define TRT_WOQ_GEMV_KERNEL_CUH

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "candidates.h"
#include "converters.cuh"
#include "converters_fp6.cuh"
#include "epilogue.cuh"
#include "gemv/gemv.h"

namespace trt_woq {
namespace gemv {

template <typename T>
struct Args {
    const T* x;              // [m, k]
    const unsigned char* w;  // packed rows of 2 k bytes
    const T* scales;         // [k / group, n]
    const T* zeros;          // same shape, or nullptr
    const T* bias;           // [n] or nullptr
    T* y;                    // [m, n]
    int m;
    int n;
    int k;
    int group_shift;         // log2(group size); unused for per-channel
    int chunks_per_split;
    int k_parts;             // contiguous parts of the CTA's K range walked at once (divides the warps)
    Epilogue ep;             // fused activation (epilogue.cuh)
};

/* ---- device helpers ---- */
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/* 16 bytes global -> shared, bypassing L1; zero-filled when !valid (no bytes read). */
__device__ __forceinline__ void cp16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp8(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(valid ? 8 : 0));
}

__device__ __forceinline__ void cp4(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;");
}

template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}

__device__ __forceinline__ uint2 lds64(uint32_t addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}

__device__ __forceinline__ void sts128(uint32_t addr, const float (&v)[4]) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]));
}

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}

/* A 16-bit global load issued where it stands: asm volatile keeps it ahead of the main loop's copies, so its latency
 * overlaps the loop and the register is waited on only where the epilogue uses it. */
__device__ __forceinline__ uint32_t ldg_u16_early(const void* p) {
    unsigned short v;
    asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t comp(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <typename T>
__device__ __forceinline__ float to_float(T v) {
    if constexpr (std::is_same<T, half>::value) return __half2float(v);
    else return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T from_float(float v) {
    if constexpr (std::is_same<T, half>::value) return __float2half_rn(v);
    else return __float2bfloat16_rn(v);
}

/* Element `hi` (0 or 1) of a 32-bit pair of T. */
template <typename T>
__device__ __forceinline__ T pick(uint32_t pair, int hi) {
    const unsigned short bits = static_cast<unsigned short>(hi ? pair >> 16 : pair & 0xFFFFu);
    T v;
    *reinterpret_cast<unsigned short*>(&v) = bits;
    return v;
}

/* Activation vector v (16 bytes) of lane q's block in row r of a chunk: swizzled so that the 8 lanes of a
 * quarter-warp hit 8 different 16-byte bank groups. Each lane reads back only what it wrote, so the swizzle is
 * private to the lane. Returns the byte offset inside the chunk's activation area (rows of KC * 2 bytes). */
template <int BITS>
__device__ __forceinline__ uint32_t act_offset(int r, int q, int v) {
    if (BITS == 4) {  // row = 256 B = 16 vectors; lane q owns vectors 4q .. 4q+3
        const int h = ((q >> 1) & 1) | ((r & 1) << 1);
        return r * 256 + (q * 4 + (v ^ h)) * 16;
    }
    return r * 128 + (q * 2 + (v ^ (r & 1))) * 16;  // row = 128 B = 8 vectors; lane q owns 2q, 2q+1
}

/* Folded INT4 conversion (symmetric or zero points, scales per channel or per chunk): one LOP3 per pair, no
 * subtraction. The mma is fed the biased values and each chunk's FP32 result is corrected afterwards with the rows'
 * activation sums (see mma_corr):
 *   FP16: low nibbles  (w & 0x000F000F) | 0x6400 = 1024 + U (ulp 1 on [1024, 2048)),        offset 1032 = 1024 + 8;
 *         high nibbles (w & 0x00F000F0) | 0x5400 = 64 + U  (16 U in the mantissa, ulp 1/16 on [64, 128)), offset 72.
 *   BF16: (w >> 4i & 0x000F000F) | 0x4300 = 128 + U, offset 136 (the high nibbles cannot use a wider base: bit 7 of a
 *         BF16 is the exponent's), so its four shifts stay.
 * 5 instructions per FP16 word (9 with the full conversion) and 7 per BF16 word (11). Pair i of the output sits in the same mma k
 * slots as convert_word's pair i: pairs 0, 2 are a0/a1 (low offset), pairs 1, 3 are a2/a3 (high offset). */
template <typename T>
__device__ __forceinline__ void convert_word_biased4(uint32_t word, typename Pair<T>::type* out);

template <>
__device__ __forceinline__ void convert_word_biased4<half>(uint32_t word, half2* out) {
    const uint32_t upper = word >> 8;
    out[0] = detail::as_pair<half2>(detail::and_or(word, 0x000F000Fu, 0x64006400u));
    out[1] = detail::as_pair<half2>(detail::and_or(word, 0x00F000F0u, 0x54005400u));
    out[2] = detail::as_pair<half2>(detail::and_or(upper, 0x000F000Fu, 0x64006400u));
    out[3] = detail::as_pair<half2>(detail::and_or(upper, 0x00F000F0u, 0x54005400u));
}

template <>
__device__ __forceinline__ void convert_word_biased4<__nv_bfloat16>(uint32_t word, __nv_bfloat162* out) {
    out[0] = detail::as_pair<__nv_bfloat162>(detail::and_or(word, 0x000F000Fu, 0x43004300u));
    out[1] = detail::as_pair<__nv_bfloat162>(detail::and_or(word >> 4, 0x000F000Fu, 0x43004300u));
    out[2] = detail::as_pair<__nv_bfloat162>(detail::and_or(word >> 8, 0x000F000Fu, 0x43004300u));
    out[3] = detail::as_pair<__nv_bfloat162>(detail::and_or(word >> 12, 0x000F000Fu, 0x43004300u));
}

/* Offsets of the folded conversion as pairs: (low-slot offset, high-slot offset). */
template <typename T>
struct FoldOffsets;
template <>
struct FoldOffsets<half> {
    static constexpr uint32_t kLo = 0x64086408u;  // 1032
    static constexpr uint32_t kHi = 0x54805480u;  // 72
    static constexpr uint32_t kOne = 0x3C003C00u;
};
template <>
struct FoldOffsets<__nv_bfloat16> {
    static constexpr uint32_t kLo = 0x43084308u;  // 136
    static constexpr uint32_t kHi = 0x43084308u;
    static constexpr uint32_t kOne = 0x3F803F80u;
};

/* The chunk's correction for the folded conversion, in mma_pair2's k order: one m16n8k16 per (word pair, pair i)
 * with constant A rows: rows 0..7 hold pair i's offset (c0/c1 = sum_k offset_k x[r][k] for activation rows r = 2q,
 * 2q+1), rows 8..15 hold ones (c2/c3 = the plain row sums, for zero points). 16-bit products are exact in FP32. */
template <typename T>
__device__ __forceinline__ void mma_corr(float (&c)[4], const uint4* xa) {
    constexpr uint32_t kLo = FoldOffsets<T>::kLo, kHi = FoldOffsets<T>::kHi, kOne = FoldOffsets<T>::kOne;
    float c2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};  // two chains of 4 mma
#pragma unroll
    for (int wp = 0; wp < 2; ++wp) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t off = i % 2 == 0 ? kLo : kHi;
            mma_m16n8k16<T>(c2[wp], off, kOne, off, kOne, comp(xa[i], 2 * wp), comp(xa[i], 2 * wp + 1));
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = c2[0][i] + c2[1][i];
}

/* A chunk's row sums (mma_corr per column tile of NB) computed once and stored for every lane of a CTA: they depend
 * on q only, so lanes g = 0 store c0..c3 (rows 2q, 2q + 1) of column tile b at `at` + 64 b + 16 q (load_corr). */
template <typename T, int NB>
__device__ __forceinline__ void store_corr(uint32_t at, int g, int q, const uint4* xa, const uint4* xb) {
    float c[NB][4];
    mma_corr<T>(c[0], xa);
    if constexpr (NB == 2) mma_corr<T>(c[1], xb);
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        if (g == 0) sts128(at + b * 64 + q * 16, c[b]);
    }
}

template <int NB>
__device__ __forceinline__ void load_corr(float (&corr)[NB][4], uint32_t at, int q) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        const uint4 v = lds128(at + b * 64 + q * 16);
        corr[b][0] = __uint_as_float(v.x);
        corr[b][1] = __uint_as_float(v.y);
        corr[b][2] = __uint_as_float(v.z);
        corr[b][3] = __uint_as_float(v.w);
    }
}

/* The arrangement (every M): tiles j (A rows 0..7) and j + 1 (A rows 8..15) as the A operand, the activation rows as
 * B, in NB = MT / 8 column tiles of 8 rows. A fragment of lane (g, q): a0/a2 = channel g of tile j (k slots 2q.. /
 * 2q+8..), a1/a3 = channel g of tile j + 1; B fragment of column tile b: b0/b1 = activation row 8b + g at the same k
 * slots. C of column tile b: c0/c1 = (tile j, rows 8b + 2q, 8b + 2q + 1), c2/c3 = tile j + 1. */
/* One tile pair's A fragments for one chunk (convert_pair2) and their mma (mma_tile2), k order "paired": one mma
 * takes pair i of two adjacent words 2wp, 2wp + 1 of each tile. Pair i of word w is block pair w + 4i (step 2 of the
 * layout), so the mma's B registers are components 2wp, 2wp + 1 of activation vector i: two consecutive registers of
 * one 16-byte shared load, so no register moves are needed to build B. FOLD (INT4 without fine groups by default)
 * folds the conversion (convert_word_biased4; the caller corrects with mma_corr). a[wp][i] = the A registers of word
 * pair wp's mma i; word pair wp of a column tile accumulates into d[wp]: independent chains of kPairs mma. With
 * NB = 2 (M > 8) each converted A fragment feeds two mma (rows 0..7 from xa, rows 8..15 from xb), so the conversion,
 * the costly part, is paid once for 16 rows. */
template <typename T, int BITS, bool FINE, bool ZEROS, bool FOLD = BITS == 4 && !FINE>
__device__ __forceinline__ void convert_pair2(uint32_t (&a)[2][BITS == 8 ? 2 : 4][4], const uint4& w0, const uint4& w1,
                                              const uint2& l0, const uint2& l1, typename Pair<T>::type z0,
                                              typename Pair<T>::type z1, typename Pair<T>::type s0,
                                              typename Pair<T>::type s1) {
    using P = typename Pair<T>::type;
    constexpr int kPairs = BITS == 8 ? 2 : 4;
    constexpr bool kFold = FOLD;
#pragma unroll
    for (int wp = 0; wp < 2; ++wp) {
        P p[4][kPairs];  // tile j word 2wp, tile j+1 word 2wp, tile j word 2wp+1, tile j+1 word 2wp+1
        const uint32_t words[4] = {comp(w0, 2 * wp), comp(w1, 2 * wp), comp(w0, 2 * wp + 1), comp(w1, 2 * wp + 1)};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            if constexpr (kFold) {
                convert_word_biased4<T>(words[u], p[u]);
            } else if constexpr (BITS == 6) {
                // 2-bit word wp of the lane's block serves its 4-bit words 2wp (u < 2) and 2wp + 1 (u >= 2).
                const uint32_t seg2 = u % 2 == 0 ? (wp == 0 ? l0.x : l0.y) : (wp == 0 ? l1.x : l1.y);
                if (u < 2) {
                    fp6::convert_fp6_word<T, 0>(words[u], seg2, p[u]);
                } else {
                    fp6::convert_fp6_word<T, 1>(words[u], seg2, p[u]);
                }
#pragma unroll
                for (int i = 0; i < kPairs; ++i) {  // fine groups: 2^12 first (exact), so value * s rounds once
                    if (FINE) p[u][i] = __hmul2(__hmul2(p[u][i], fp6::bias_pair<T>()), u % 2 == 0 ? s0 : s1);
                }
            } else {
                convert_word<T, BITS>(words[u], p[u]);
#pragma unroll
                for (int i = 0; i < kPairs; ++i) {
                    if (ZEROS) p[u][i] = __hsub2(p[u][i], u % 2 == 0 ? z0 : z1);
                    if (FINE) p[u][i] = __hmul2(p[u][i], u % 2 == 0 ? s0 : s1);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < kPairs; ++i) {
#pragma unroll
            for (int u = 0; u < 4; ++u) a[wp][i][u] = detail::as_u32(p[u][i]);
        }
    }
}

/* Word pair wp's mma of one column tile: A fragments `a` (convert_pair2), B = activation vectors x. */
template <typename T, int BITS>
__device__ __forceinline__ void mma_tile2(float (&d)[2][4], const uint32_t (&a)[2][BITS == 8 ? 2 : 4][4],
                                          const uint4* x) {
#pragma unroll
    for (int wp = 0; wp < 2; ++wp) {
#pragma unroll
        for (int i = 0; i < (BITS == 8 ? 2 : 4); ++i) {
            mma_m16n8k16<T>(d[wp], a[wp][i][0], a[wp][i][1], a[wp][i][2], a[wp][i][3], comp(x[i], 2 * wp),
                            comp(x[i], 2 * wp + 1));
        }
    }
}

template <typename T, int BITS, int NB, bool FINE, bool ZEROS>
__device__ __forceinline__ void mma_pair2(float (&d)[NB][2][4], const uint4& w0, const uint4& w1, const uint2& l0,
                                          const uint2& l1, const uint4* xa, const uint4* xb,
                                          typename Pair<T>::type z0, typename Pair<T>::type z1,
                                          typename Pair<T>::type s0, typename Pair<T>::type s1) {
    uint32_t a[2][BITS == 8 ? 2 : 4][4];
    convert_pair2<T, BITS, FINE, ZEROS>(a, w0, w1, l0, l1, z0, z1, s0, s1);
    mma_tile2<T, BITS>(d[0], a, xa);
    if constexpr (NB == 2) mma_tile2<T, BITS>(d[1], a, xb);
}

/* How scales apply (a template parameter: no per-element branches in the loop). */
enum ScaleMode { kPerChannel = 0, kChunkGroup = 1, kFineGroup = 2 };

/* Adds one chunk's sums t2 (mma_tile2's two chains) of one column tile to its accumulators: folded INT4 sums
 * corrected with `corr` (mma_corr) and the zero points zfa / zfb (z - 2^(bits-1)), chunk-group scales sa / sb applied;
 * TWO: t2 is the accumulators' running state (kept across chunks), copied back. FOLD: the sums come from the folded
 * conversion (convert_pair2's FOLD). */
template <typename T, int BITS, int MODE, bool ZEROS, bool TWO, bool FOLD = BITS == 4 && MODE != kFineGroup>
__device__ __forceinline__ void finish_tile(float (&acc)[4], float (&acc2)[4], const float (&t2)[2][4],
                                            const float (&corr)[4], float zfa, float zfb, T sa, T sb) {
    constexpr bool kFold = FOLD;
    float t[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) t[i] = t2[0][i] + t2[1][i];
    if constexpr (kFold) {  // biased sums: subtract the offsets' and the zero points' share
        t[0] -= corr[0];
        t[1] -= corr[1];
        t[2] -= corr[0];
        t[3] -= corr[1];
        if (ZEROS) {
            t[0] = fmaf(-zfa, corr[2], t[0]);
            t[1] = fmaf(-zfa, corr[3], t[1]);
            t[2] = fmaf(-zfb, corr[2], t[2]);
            t[3] = fmaf(-zfb, corr[3], t[3]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (TWO) {
            acc[i] = t2[0][i];
            acc2[i] = t2[1][i];
        } else if constexpr (MODE == kChunkGroup) {
            const float f = to_float(i < 2 ? sa : sb) * (BITS == 6 ? fp6::kBiasScale : 1.0f);
            acc[i] = fmaf(t[i], f, acc[i]);
        } else {
            acc[i] += t[i];
        }
    }
}

/* One chunk of tile pair (j, j + 1): acc[b] / acc2[b] are its accumulators of column tile b (acc2: mma_pair2's second
 * chain, kept across chunks where the chunk's sums need no per-chunk step: plain conversion, scales per channel or on
 * the weights). Folded INT4 sums are corrected with the chunk's row sums `corr` (mma_corr) and the zero points
 * za / zb (tiles j / j + 1; raw values); chunk-group scales sa / sb multiply the chunk's sums, fine-group ones the
 * converted weights (mma_pair2). */
template <typename T, int BITS, int MODE, bool ZEROS, int NB>
__device__ __forceinline__ void chunk_pair(float (*acc)[4], float (*acc2)[4], const uint4& w0, const uint4& w1,
                                           const uint2& l0, const uint2& l1, const uint4* xa, const uint4* xb,
                                           const float (&corr)[NB][4], T za, T zb, T sa, T sb) {
    using P = typename Pair<T>::type;
    constexpr bool kFold = BITS == 4 && MODE != kFineGroup;
    constexpr bool kTwoAcc = !kFold && MODE != kChunkGroup;
    const float zfa = to_float(za) - static_cast<float>(1 << (BITS - 1));  // z - 2^(bits-1)
    const float zfb = to_float(zb) - static_cast<float>(1 << (BITS - 1));
    const P z0(from_float<T>(zfa), from_float<T>(zfa)), z1(from_float<T>(zfb), from_float<T>(zfb));
    const P s0(sa, sa), s1(sb, sb);
    float t2[NB][2][4];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            t2[b][0][i] = kTwoAcc ? acc[b][i] : 0.0f;
            t2[b][1][i] = kTwoAcc ? acc2[b][i] : 0.0f;
        }
    }
    mma_pair2<T, BITS, NB, MODE == kFineGroup, ZEROS>(t2, w0, w1, l0, l1, xa, xb, z0, z1, s0, s1);
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        finish_tile<T, BITS, MODE, ZEROS, kTwoAcc>(acc[b], acc2[b], t2[b], corr[b], zfa, zfb, sa, sb);
    }
}

template <typename T, int BITS, int MODE, bool ZEROS, int NT, int MT, int STAGES, int XS>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_kernel(Args<T> a) {
    // FP6 (layout 2): the 4-bit words sit where layout 1 puts INT4, so FP6 takes INT4's geometry; its 2-bit words
    // follow in the same packed row at half the 4-bit offsets (docs/layouts.md).
    constexpr int GB = BITS == 8 ? 8 : 4;       // the layout-1 width whose geometry applies
    constexpr bool kFp6 = BITS == 6;
    constexpr int I = GB == 4 ? 4 : 2;          // channels per packed row
    constexpr int KC = GB == 4 ? 128 : 64;      // k per chunk (4 lanes x one block)
    constexpr int BK = KC / 4;                  // k per lane block
    constexpr int kVec = BK * 2 / 16;           // 16-byte activation vectors per lane block and row
    constexpr int kStride = GB == 4 ? 256 : 128;  // packed-row bytes per chunk (4-bit words for FP6)
    constexpr bool GROUPED = MODE != kPerChannel;
    // Weights are the mma's A operand (16 channels = tiles j, j+1), activations its B in NB column tiles of 8 rows.
    static_assert(NT % 2 == 0, "the A operand pairs tiles");
    constexpr int NB = MT / 8;
    constexpr bool FOLD = BITS == 4 && MODE != kFineGroup;  // folded INT4 conversion (mma_pair2)
    constexpr bool kResident = XS == kResidentX;

    extern __shared__ __align__(16) unsigned char smem[];
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int q = lane & 3;
    // XS: warp w owns tiles w NT .. w NT + NT - 1 of the CTA's and every warp walks all of its chunks.
    const int cta_base = blockIdx.y * 8 * NT * (XS ? warps : 1);
    const int n_base = cta_base + (XS ? warp * 8 * NT : 0);
    const int nchunks = (a.k + KC - 1) / KC;
    const int c_begin = blockIdx.x * a.chunks_per_split;
    const int c_end = min(nchunks, c_begin + a.chunks_per_split);
    constexpr bool has_zeros = ZEROS;
    constexpr bool chunk_scaled = MODE == kChunkGroup;
    const int m = a.m;

    // A warp's part of a stage: [weights NT x 32 x 16 B | scales NT x 32 x 4 B | zeros NT x 32 x 4 B | FP6: 2-bit
    // words NT x 32 x 8 B]; the activations of a stage are m x KC x 2 B. Per-warp pipeline (!XS): STAGES x [warp part |
    // activations] per warp. XS: STAGES x [activations | warp 0's part | warp 1's part ...], the activations copied
    // by the whole CTA and read by every warp.
    // XS leaves out the scale and zero areas the mode never reads.
    const uint32_t s_off = NT * 512;
    const uint32_t z_off = s_off + (XS && !GROUPED ? 0 : NT * 128);
    const uint32_t l_off = z_off + (XS && !(GROUPED && ZEROS) ? 0 : NT * 128);
    const uint32_t part_bytes = l_off + (kFp6 ? NT * 256 : 0);
    const uint32_t x_bytes = m * KC * 2;
    // Resident activations (kResident): [the split's activations, chunk i at i x x_bytes | FOLD: the chunks' row sums,
    // NB x 64 B per chunk | per-warp pipelines of STAGES x part_bytes].
    const uint32_t slice_bytes = kResident ? a.chunks_per_split * x_bytes : 0;
    const uint32_t sums_bytes = kResident && FOLD ? a.chunks_per_split * NB * 64 : 0;
    const uint32_t stage_bytes = kResident ? part_bytes : XS ? x_bytes + warps * part_bytes : part_bytes + x_bytes;
    const uint32_t stage0 = smem_addr(smem) + (kResident ? slice_bytes + sums_bytes + warp * STAGES * part_bytes
                                               : XS ? 0 : warp * STAGES * stage_bytes);
    const uint32_t w_in_stage = XS == kRingX ? x_bytes + warp * part_bytes : 0;
    const uint32_t x_in_stage = XS ? 0 : part_bytes;
    auto w_stage = [&](int stage) -> uint32_t { return stage0 + stage * stage_bytes + w_in_stage; };
    auto x_stage = [&](int stage) -> uint32_t { return stage0 + stage * stage_bytes + x_in_stage; };

    // Per-lane sources (chunk 0); each chunk adds kStride to weights and KC to activations.
    const unsigned char* wptr[NT];
    const unsigned char* lptr[kFp6 ? NT : 1];  // FP6: this lane's 2-bit words (8 B per chunk)
    bool nvalid[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int c = n_base + 8 * j + g;
        nvalid[j] = c < a.n;
        const int r = c / I;
        const int ci = c % I;
        const size_t row = static_cast<size_t>(r) * a.k * (kFp6 ? 3 : 2);  // packed-row bytes: 2 K, FP6 3 K
        const size_t off = GB == 4 ? row + ci * 32 + (q >> 1) * 128 + (q & 1) * 16 : row + ci * 64 + q * 16;
        if constexpr (kFp6) lptr[j] = nvalid[j] ? a.w + row + 2 * static_cast<size_t>(a.k) + (off - row) / 2 : a.w;
        wptr[j] = nvalid[j] ? a.w + off : a.w;
    }
    const T* xrow_a = a.x + static_cast<size_t>(g) * a.k + q * BK;
    const T* xrow_b = a.x + static_cast<size_t>(g + 8) * a.k + q * BK;

    // The copies, addressed from loop-invariant parts (one 64-bit add per copy, no selects). A copy that reads nothing
    // (src-size 0: channel past N or k past K) keeps an address inside the same tensor: invalid channels point at
    // packed row 0 and scale column 0, k past K at the chunk-0 position.
    int scol[NT];  // this lane's scale/zero pair column
#pragma unroll
    for (int j = 0; j < NT; ++j) scol[j] = nvalid[j] ? ((n_base + 8 * j + g) & ~1) : 0;
    // The CTA's threads copy the m x KC activations of `count` chunks from `chunk` on (x_bytes apart from `dst`),
    // vector u of row r (k 8u .. 8u + 7) to the slot of lane block u / kVec, vector u % kVec. A lane block lies wholly
    // inside or past K (K % 64 == 0). One chunk: one pass over m x kRowVec vectors; several: row by row, consecutive
    // threads on consecutive vectors of the row's K range.
    constexpr int kRowVec = KC * 2 / 16;
    auto copy_vec = [&](int r, int ci, int u, int chunk, uint32_t dst) {
        const int kx = (chunk + ci) * KC + 8 * u;
        const bool valid = kx < a.k;
        cp16(dst + ci * x_bytes + act_offset<GB>(r, u / kVec, u % kVec),
             a.x + static_cast<size_t>(r) * a.k + (valid ? kx : 0), valid);
    };
    auto copy_x = [&](int chunk, int count, uint32_t dst) {
        if (count == 1) {
            for (int i = threadIdx.x; i < m * kRowVec; i += blockDim.x) {
                copy_vec(i / kRowVec, 0, i % kRowVec, chunk, dst);
            }
            return;
        }
        for (int r = 0; r < m; ++r) {
            for (int v = threadIdx.x; v < count * kRowVec; v += blockDim.x) {
                copy_vec(r, v / kRowVec, v % kRowVec, chunk, dst);
            }
        }
    };
    auto issue = [&](int chunk, int stage) {
        const uint32_t st = w_stage(stage);
        const uint32_t xst = x_stage(stage);
        const int kc0 = chunk * KC;
        const int k0 = kc0 + q * BK;
        const bool kvalid = k0 < a.k;
        const size_t woff = kvalid ? static_cast<size_t>(chunk) * kStride : 0;
#pragma unroll
        for (int j = 0; j < NT; ++j) cp16(st + (j * 32 + lane) * 16, wptr[j] + woff, nvalid[j] && kvalid);
        if constexpr (kFp6) {
#pragma unroll
            for (int j = 0; j < NT; ++j) cp8(st + l_off + (j * 32 + lane) * 8, lptr[j] + woff / 2, nvalid[j] && kvalid);
        }
        if constexpr (XS == kRingX) {
            copy_x(chunk, 1, xst);
        } else if constexpr (XS == kPrivateX) {
            if (g < m) {
                const T* xs = xrow_a + (kvalid ? kc0 : 0);
#pragma unroll
                for (int v = 0; v < kVec; ++v) cp16(xst + act_offset<GB>(g, q, v), xs + 8 * v, kvalid);
            }
            if (MT == 16 && g + 8 < m) {
                const T* xs = xrow_b + (kvalid ? kc0 : 0);
#pragma unroll
                for (int v = 0; v < kVec; ++v) cp16(xst + act_offset<GB>(g + 8, q, v), xs + 8 * v, kvalid);
            }
        }
        if (GROUPED) {
            const size_t row = static_cast<size_t>((kvalid ? k0 : kc0) >> a.group_shift) * a.n;
            const T* srow = a.scales + row;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                cp4(st + s_off + (j * 32 + lane) * 4, srow + scol[j], nvalid[j] && (chunk_scaled || kvalid));
            }
            if (has_zeros) {
                const T* zrow = a.zeros + row;
#pragma unroll
                for (int j = 0; j < NT; ++j) cp4(st + z_off + (j * 32 + lane) * 4, zrow + scol[j], nvalid[j] && kvalid);
            }
        }
    };

    // The epilogue's per-channel scales and bias, requested now: loaded after the loop they added a DRAM latency to
    // every CTA's tail. Lane l of warp 0 holds channels n_base + l + 32 i (raw 16-bit values; 0 past N or when absent).
    constexpr int kChannels = NT * 8;
    constexpr int kChannelsPerLane = (kChannels + 31) / 32;
    uint32_t early_scale[kChannelsPerLane];
    uint32_t early_bias[kChannelsPerLane];
#pragma unroll
    for (int i = 0; i < kChannelsPerLane; ++i) {
        const int t = lane + 32 * i;
        const bool mine = (XS || warp == 0) && t < kChannels && n_base + t < a.n;
        early_scale[i] = (!GROUPED && mine) ? ldg_u16_early(a.scales + n_base + t) : 0u;
        early_bias[i] = (a.bias != nullptr && mine) ? ldg_u16_early(a.bias + n_base + t) : 0u;
    }

    // Per-channel zero points are constant along K.
    T zpc[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int c = n_base + 8 * j + g;
        zpc[j] = (!GROUPED && has_zeros && nvalid[j]) ? a.zeros[c] : from_float<T>(0.0f);
    }

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    // acc[j + b] (j even) holds tile pair (j, j + 1) for column tile b (see mma_pair2's C). Kernels whose chunk sums
    // need no per-chunk step (plain conversion, scales per channel or on the weights): mma_pair2's second chain
    // accumulates in acc2 across chunks, added to acc after the loop.
    constexpr bool kTwoAcc = !FOLD && !chunk_scaled;
    float acc2[kTwoAcc ? NT : 1][4];
#pragma unroll
    for (int j = 0; j < (kTwoAcc ? NT : 1); ++j) acc2[j][0] = acc2[j][1] = acc2[j][2] = acc2[j][3] = 0.0f;

    // The CTA walks its K range at k_parts places at once: warp w takes chunks of contiguous part w % k_parts, so each
    // packed row is read at k_parts fronts (k_parts = 1: chunk c -> warp c % warps). XS: every warp takes every chunk.
    const int part = XS ? 0 : warp % a.k_parts;
    const int part_warps = XS ? 1 : warps / a.k_parts;
    const int part_end = XS ? c_end : c_begin + (c_end - c_begin) * (part + 1) / a.k_parts;
    const int first = XS ? c_begin : c_begin + (c_end - c_begin) * part / a.k_parts + warp / a.k_parts;
    // Rows g (xa) and g + 8 (xb, MT = 16) of lane q's block of the chunk whose activations start at xst (zero past m).
    auto load_x = [&](uint32_t xst, uint4* xa, uint4* xb) {
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
            xa[v] = g < m ? lds128(xst + act_offset<GB>(g, q, v)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int v = 0; v < (MT == 16 ? kVec : 1); ++v) {
            xb[v] = (MT == 16 && g + 8 < m) ? lds128(xst + act_offset<GB>(g + 8, q, v)) : make_uint4(0, 0, 0, 0);
        }
    };
    const uint32_t slice0 = smem_addr(smem);
    if constexpr (kResident) {  // the split's activations: the oldest copy group of every thread
        copy_x(c_begin, c_end - c_begin, slice0);
        cp_commit();
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int c = first + s * part_warps;
        if (c < part_end) {
            issue(c, s);
        }
        cp_commit();
    }
    if constexpr (kResident) {
        cp_wait<STAGES - 1>();  // this thread's activation copies have landed (the weights' stay in flight)
        __syncthreads();
        if constexpr (FOLD) {
            // The folded conversion's row sums (mma_corr) once per CTA: warp w takes chunks w, w + warps, ...; lanes
            // g = 0 store their c0..c3 (rows 2q, 2q + 1) per column tile, which every lane q reads back in the loop.
            for (int i = warp; i < c_end - c_begin; i += warps) {
                uint4 xa[kVec];
                uint4 xb[MT == 16 ? kVec : 1];
                load_x(slice0 + i * x_bytes, xa, xb);
                store_corr<T, NB>(slice0 + slice_bytes + i * NB * 64, g, q, xa, xb);
            }
            __syncthreads();
        }
    }
    int stage = 0;
    for (int c = first; c < part_end; c += part_warps) {
        cp_wait<STAGES - 2>();  // this lane's copies of chunk c have landed
        // Ring: every thread's copies of chunk c have landed, and every warp is done with the slot refilled below.
        if constexpr (XS == kRingX) __syncthreads();
        {
            const int cn = c + (STAGES - 1) * part_warps;
            const int sn = stage == 0 ? STAGES - 1 : stage - 1;  // the slot consumed in the previous iteration
            if (cn < part_end) {
                issue(cn, sn);
            }
            cp_commit();
        }
        const uint32_t st = w_stage(stage);
        uint4 xa[kVec];
        uint4 xb[MT == 16 ? kVec : 1];
        load_x(kResident ? slice0 + (c - c_begin) * x_bytes : x_stage(stage), xa, xb);
        // Folded conversion: the chunk's row sums per column tile, once for all tiles (c0/c1 offsets, c2/c3 plain
        // sums); resident activations read the CTA's.
        float corr[NB][4] = {};
        if constexpr (FOLD && kResident) {
            load_corr<NB>(corr, slice0 + slice_bytes + (c - c_begin) * NB * 64, q);
        } else if constexpr (FOLD) {
            mma_corr<T>(corr[0], xa);
            if constexpr (NB == 2) mma_corr<T>(corr[1], xb);
        }
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            const uint4 w0 = lds128(st + (j * 32 + lane) * 16);
            const uint4 w1 = lds128(st + ((j + 1) * 32 + lane) * 16);
            const uint2 l0 = kFp6 ? lds64(st + l_off + (j * 32 + lane) * 8) : make_uint2(0, 0);
            const uint2 l1 = kFp6 ? lds64(st + l_off + ((j + 1) * 32 + lane) * 8) : make_uint2(0, 0);
            const int odd = (n_base + 8 * j + g) & 1;  // same parity for tile j + 1 (tiles are 8 apart)
            T za = from_float<T>(0.0f), zb = za, sa = za, sb = za;
            if (has_zeros) {
                za = GROUPED ? pick<T>(lds32(st + z_off + (j * 32 + lane) * 4), odd) : zpc[j];
                zb = GROUPED ? pick<T>(lds32(st + z_off + ((j + 1) * 32 + lane) * 4), odd) : zpc[j + 1];
            }
            if constexpr (GROUPED) {
                sa = pick<T>(lds32(st + s_off + (j * 32 + lane) * 4), odd);
                sb = pick<T>(lds32(st + s_off + ((j + 1) * 32 + lane) * 4), odd);
            }
            chunk_pair<T, BITS, MODE, ZEROS, NB>(acc + j, acc2 + (kTwoAcc ? j : 0), w0, w1, l0, l1, xa, xb, corr, za, zb,
                                                sa, sb);
        }
        stage = stage == STAGES - 1 ? 0 : stage + 1;
    }
    cp_wait<0>();
    if constexpr (kTwoAcc) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[j][i] += acc2[j][i];
        }
    }
    __syncthreads();  // the pipeline's shared memory becomes the reduction buffer

    // Cross-warp reduction. Pair (j, j+1), column tile b: c0 (channel g of tile j, row 8b + 2q), c1 (same, row
    // 8b + 2q + 1), c2/c3 the same for tile j + 1.
    float* red = reinterpret_cast<float*>(smem);  // [warps][NT][MT][8]
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float* r0 = red + ((warp * NT + j) * MT + 8 * b) * 8;
            float* r1 = r0 + MT * 8;
            r0[(2 * q) * 8 + g] = acc[j + b][0];
            r0[(2 * q + 1) * 8 + g] = acc[j + b][1];
            r1[(2 * q) * 8 + g] = acc[j + b][2];
            r1[(2 * q + 1) * 8 + g] = acc[j + b][3];
        }
    }
    __syncthreads();
    constexpr int kOutputs = NT * MT * 8;
    // The CTA's sums: summed over the warps, or (XS) each warp's own channels as they stand.
    float* fin = XS ? red : red + warps * kOutputs;
    const int outs = XS ? warps * kOutputs : kOutputs;
    // red, fin and the [kChannels] arrays (per warp for XS) fit in the pipeline's shared memory (>= STAGES x NT x
    // 512 B per warp), even with one warp.
    static_assert(2 * MT * 8 * 4 + 2 * 8 * 4 <= STAGES * 512, "epilogue buffers exceed the pipeline's shared memory");
    float* chan_scale = fin + outs;
    float* chan_bias = chan_scale + (XS ? warps : 1) * kChannels;
    if (XS || warp == 0) {
        const int c0 = XS ? warp * kChannels : 0;
#pragma unroll
        for (int i = 0; i < kChannelsPerLane; ++i) {
            const int t = lane + 32 * i;
            if (t < kChannels) {
                chan_scale[c0 + t] = to_float(pick<T>(early_scale[i], 0)) * (kFp6 ? fp6::kBiasScale : 1.0f);
                chan_bias[c0 + t] = to_float(pick<T>(early_bias[i], 0));
            }
        }
    }
    const int nsplit = gridDim.x;
    if constexpr (!XS) {
        for (int o = threadIdx.x; o < kOutputs; o += blockDim.x) {
            float sum = 0.0f;
            for (int w = 0; w < warps; ++w) sum += red[w * kOutputs + o];
            fin[o] = sum;
        }
    }
    // Output o of the CTA: tile j of the CTA (XS: warp j / NT's tile j % NT), activation row, channel of the tile.
    auto output_at = [&](int o, int* row, int* ch) {
        *row = (o / 8) % MT;
        *ch = 8 * (o / (MT * 8)) + o % 8;
        return *row < m && cta_base + *ch < a.n;
    };
    auto store = [&](int row, int ch, float sum) {
        if (!GROUPED) sum *= chan_scale[ch];
        if (a.bias != nullptr) sum += chan_bias[ch];
        a.y[static_cast<size_t>(row) * a.n + cta_base + ch] = from_float<T>(apply_epilogue(sum, a.ep));
    };
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    if (nsplit > 1) {
        // Rank r of the cluster adds slice r of the outputs over every CTA's fin and stores it: the distributed
        // shared-memory reads are spread over the cluster instead of left to one CTA.
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();  // every CTA's fin and channel arrays are complete
        const int rank = static_cast<int>(cluster.block_rank());
        for (int o = outs * rank / nsplit + threadIdx.x; o < outs * (rank + 1) / nsplit; o += blockDim.x) {
            int row, ch;
            if (!output_at(o, &row, &ch)) continue;
            float sum = 0.0f;
            for (int r = 0; r < nsplit; ++r) sum += cluster.map_shared_rank(fin, r)[o];
            store(row, ch, sum);
        }
        cluster.sync();  // every CTA's shared memory stays alive until the others have read it
        return;
    }
#endif
    __syncthreads();
    for (int o = threadIdx.x; o < outs; o += blockDim.x) {
        int row, ch;
        if (output_at(o, &row, &ch)) store(row, ch, fin[o]);
    }
}

/* ---- host side ---- */
/* A launch's shape: grid (nsplit, tiles), warps per CTA, dynamic shared memory, chunks per split. */
struct Launch {
    int nsplit = 1;
    int64_t tiles = 0;
    int warps = 1;
    size_t smem = 0;
    int cps = 0;
};

/* Per-warp pipelines (!XS): the plan's CTAs of NT tiles; K split over a cluster (plan.cluster) to fill every resident
 * slot once, at most 8 CTAs (the portable cluster size), at least two chunks per warp. */
template <typename Kernel>
trt_woq_status plan_warp_private(Kernel kernel, const Plan& plan, int64_t nchunks, Launch* out) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(plan.warps * plan.smem_per_warp));
    if (err != cudaSuccess) return record_cuda_error(err);
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, plan.warps * 32,
                                                        plan.warps * plan.smem_per_warp);
    if (err != cudaSuccess) return record_cuda_error(err);
    const int64_t slots = static_cast<int64_t>(std::max(per_sm, 1)) * plan.sms;
    int nsplit = 1;
    if (plan.cluster) {
        nsplit = 8;
        while (nsplit > 1 && (plan.tiles * nsplit > slots || nchunks < 2 * plan.warps * nsplit)) --nsplit;
    }
    const int cps = static_cast<int>((nchunks + nsplit - 1) / nsplit);
    nsplit = static_cast<int>((nchunks + cps - 1) / cps);
    int warps = plan.warps;
    if (plan.fit && nsplit == 1 && static_cast<int64_t>(per_sm) * plan.sms < plan.tiles) {
        // More CTAs than resident slots: down to half the warps per CTA if that makes every CTA resident at once
        // (no partial second wave; measured on INT8 8192 x 10240, M = 1, docs/performance.md).
        for (int w = plan.warps - 1; w >= std::max(1, plan.warps / 2); --w) {
            int occ = 0;
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, w * 32, w * plan.smem_per_warp);
            if (err != cudaSuccess) return record_cuda_error(err);
            if (static_cast<int64_t>(occ) * plan.sms >= plan.tiles) {
                warps = w;
                break;
            }
        }
    }
    while (warps > 1 && cps < 2 * warps) --warps;
    out->nsplit = nsplit;
    out->tiles = plan.tiles;
    out->warps = warps;
    out->cps = cps;
    return TRT_WOQ_OK;
}

/* Shared activations (XS): CTAs of 8 warps x NT tiles, or 4 warps where 8-warp CTAs leave more than a tenth of the SMs
 * idle; K split over a cluster (at most 8 CTAs) as far as every CTA stays resident and each split keeps STAGES chunks. */
template <typename Kernel>
trt_woq_status plan_shared_x(Kernel kernel, const Plan& plan, const trt_woq_linear_params* p, int nt, int stages,
                             int64_t nchunks, Launch* out) {
    const size_t part = warp_stage_bytes(p->weight_format, nt, p->group_size != -1, p->group_size != -1 && p->zeros);
    const size_t act = act_stage_bytes(p->weight_format, p->m);
    for (int warps = kMaxWarps; warps >= kMaxWarps / 2; warps /= 2) {
        const size_t smem = stages * (act + warps * part);
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        if (err != cudaSuccess) return record_cuda_error(err);
        int per_sm = 0;
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem);
        if (err != cudaSuccess) return record_cuda_error(err);
        const int64_t slots = static_cast<int64_t>(std::max(per_sm, 1)) * plan.sms;
        const int64_t tiles = (p->n + 8 * nt * warps - 1) / (8 * nt * warps);
        int nsplit = 8;
        while (nsplit > 1 && (tiles * nsplit > slots || nchunks < static_cast<int64_t>(stages) * nsplit)) --nsplit;
        const int cps = static_cast<int>((nchunks + nsplit - 1) / nsplit);
        out->nsplit = static_cast<int>((nchunks + cps - 1) / cps);
        out->tiles = tiles;
        out->warps = warps;
        out->smem = smem;
        out->cps = cps;
        if (10 * tiles * out->nsplit >= 9 * static_cast<int64_t>(plan.sms)) break;
    }
    return TRT_WOQ_OK;
}

/* Resident activations: CTAs of 8 or 4 warps x NT tiles; the (warps, K split over a cluster of at most 8) whose shared
 * memory fits and scores best: the fraction of the SMs' CTA slots the waves fill, times the resident warps per SM up
 * to 16, times 0.9 where a CTA cannot share its SM with another (measured: INT4 14336 x 4096, M = 16, 8 warps, one
 * CTA per SM 32.6 us; M = 12, 4 warps, two per SM 20.3 us); ties keep fewer splits and 8 warps. UNSUPPORTED_SHAPE when
 * no split fits (resident_fits() refuses those). */
template <typename Kernel>
trt_woq_status plan_resident_x(Kernel kernel, const Plan& plan, const trt_woq_linear_params* p, int nt, int stages,
                               int64_t nchunks, Launch* out) {
    const size_t part = warp_stage_bytes(p->weight_format, nt, p->group_size != -1, p->group_size != -1 && p->zeros);
    double best = -1.0;
    for (int warps = kMaxWarps; warps >= kMaxWarps / 2; warps /= 2) {
        const int64_t tiles = (p->n + 8 * nt * warps - 1) / (8 * nt * warps);
        for (int split = 1; split <= 8; ++split) {
            const int64_t cps = (nchunks + split - 1) / split;
            const int64_t nsplit = (nchunks + cps - 1) / cps;
            if (nsplit != split) continue;
            const size_t smem = resident_smem_bytes(p, plan.mt, cps) + warps * stages * part;
            if (smem > static_cast<size_t>(plan.smem_optin)) continue;
            cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem));
            if (err != cudaSuccess) return record_cuda_error(err);
            int per_sm = 0;
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem);
            if (err != cudaSuccess) return record_cuda_error(err);
            if (per_sm == 0) continue;
            const int64_t slots = static_cast<int64_t>(per_sm) * plan.sms;
            const int64_t ctas = tiles * nsplit;
            const int64_t waves = (ctas + slots - 1) / slots;
            const double filled = static_cast<double>(ctas) / static_cast<double>(waves * slots);
            const int64_t per_sm_used = std::min<int64_t>(per_sm, (ctas + plan.sms - 1) / plan.sms);
            const double warps_per_sm = static_cast<double>(per_sm_used * warps);
            const double score = filled * std::min(1.0, warps_per_sm / 16.0) * (per_sm >= 2 ? 1.0 : 0.9);
            if (score > best + 1e-9) {
                best = score;
                out->nsplit = static_cast<int>(nsplit);
                out->tiles = tiles;
                out->warps = warps;
                out->smem = smem;
                out->cps = static_cast<int>(cps);
            }
        }
    }
    if (best < 0.0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    // The last attribute set belongs to the last configuration tried: set the chosen one's.
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(out->smem));
    return err == cudaSuccess ? TRT_WOQ_OK : record_cuda_error(err);
}

/* The kernel arguments of p (chunks_per_split and k_parts are the launcher's). */
template <typename T>
Args<T> args_of(const trt_woq_linear_params* p) {
    Args<T> a = {};
    a.x = static_cast<const T*>(p->activation);
    a.w = static_cast<const unsigned char*>(p->packed_weight);
    a.scales = static_cast<const T*>(p->scales);
    a.zeros = static_cast<const T*>(p->zeros);
    a.bias = static_cast<const T*>(p->bias);
    a.y = static_cast<T*>(p->output);
    a.m = static_cast<int>(p->m);
    a.n = static_cast<int>(p->n);
    a.k = static_cast<int>(p->k);
    a.ep = epilogue_of(*p);
    while (p->group_size > 0 && (1 << a.group_shift) < p->group_size) ++a.group_shift;
    return a;
}

template <typename T, int BITS, int MODE, bool ZEROS, int NT, int MT, int STAGES, int XS>
trt_woq_status launch_kernel(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream) {
    Args<T> a = args_of<T>(p);
    auto kernel = gemv_kernel<T, BITS, MODE, ZEROS, NT, MT, STAGES, XS>;
    const int64_t kc = BITS == 8 ? 64 : 128;
    const int64_t nchunks = (p->k + kc - 1) / kc;
    Launch l;
    const trt_woq_status s = XS == kResidentX ? plan_resident_x(kernel, plan, p, NT, STAGES, nchunks, &l)
                             : XS == kRingX    ? plan_shared_x(kernel, plan, p, NT, STAGES, nchunks, &l)
                                               : plan_warp_private(kernel, plan, nchunks, &l);
    if (s != TRT_WOQ_OK) return s;
    a.k_parts = XS ? 1 : std::min(plan.k_parts, l.warps);
    if (!XS) {
        l.warps -= l.warps % a.k_parts;
        l.smem = l.warps * plan.smem_per_warp;
    }
    a.chunks_per_split = l.cps;
    const dim3 grid(static_cast<unsigned>(l.nsplit), static_cast<unsigned>(l.tiles));
    const dim3 block(static_cast<unsigned>(l.warps * 32));
    return launch_in_clusters(kernel, grid, block, l.smem, static_cast<unsigned>(l.nsplit), stream, a);
}

/* The compiled (NT, MT) pairs; see the candidate table in gemv.cu. */
template <typename T, int BITS, int MODE, bool ZEROS>
trt_woq_status launch_nt(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream) {
    if constexpr (BITS != 6) {  // no FP6 candidate shares activations
        if (plan.xs == kRingX) {
            return plan.mt == 8 ? launch_kernel<T, BITS, MODE, ZEROS, 4, 8, kStagesXs, kRingX>(plan, p, stream)
                                : launch_kernel<T, BITS, MODE, ZEROS, 4, 16, kStagesXs, kRingX>(plan, p, stream);
        }
        if (plan.xs == kResidentX) {  // per-warp pipelines: kStages
            switch (plan.nt * 100 + plan.mt) {
                case 208: return launch_kernel<T, BITS, MODE, ZEROS, 2, 8, kStages, kResidentX>(plan, p, stream);
                case 216: return launch_kernel<T, BITS, MODE, ZEROS, 2, 16, kStages, kResidentX>(plan, p, stream);
                case 408: return launch_kernel<T, BITS, MODE, ZEROS, 4, 8, kStages, kResidentX>(plan, p, stream);
                case 416: return launch_kernel<T, BITS, MODE, ZEROS, 4, 16, kStages, kResidentX>(plan, p, stream);
                default: return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
            }
        }
    }
    switch (plan.nt * 100 + plan.mt) {
        case 208: return launch_kernel<T, BITS, MODE, ZEROS, 2, 8, kStages, kPrivateX>(plan, p, stream);
        case 408: return launch_kernel<T, BITS, MODE, ZEROS, 4, 8, kStages, kPrivateX>(plan, p, stream);
        case 608: return launch_kernel<T, BITS, MODE, ZEROS, 6, 8, kStages, kPrivateX>(plan, p, stream);
        case 416: return launch_kernel<T, BITS, MODE, ZEROS, 4, 16, kStages, kPrivateX>(plan, p, stream);
        case 816: return launch_kernel<T, BITS, MODE, ZEROS, 8, 16, kStages, kPrivateX>(plan, p, stream);
        default: return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
}

template <typename T, int BITS, int MODE>
trt_woq_status launch_zeros(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream) {
    if constexpr (BITS == 6) {  // FP6 has no zero points (supports() refuses them)
        return launch_nt<T, BITS, MODE, false>(plan, p, stream);
    } else {
        return p->zeros != nullptr ? launch_nt<T, BITS, MODE, true>(plan, p, stream)
                                   : launch_nt<T, BITS, MODE, false>(plan, p, stream);
    }
}

template <typename T, int BITS>
trt_woq_status launch_typed(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream) {
    constexpr int kc = BITS == 8 ? 64 : 128;
    if (p->group_size == -1) return launch_zeros<T, BITS, kPerChannel>(plan, p, stream);
    if (p->group_size >= kc) return launch_zeros<T, BITS, kChunkGroup>(plan, p, stream);
    return launch_zeros<T, BITS, kFineGroup>(plan, p, stream);
}

}  // namespace gemv
}  // namespace trt_woq

#endif /* TRT_WOQ_GEMV_KERNEL_CUH */
