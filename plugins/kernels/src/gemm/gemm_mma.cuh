// Tensor-core weight-only GEMM (M > 16) on mma.sync.m16n8k16, reading packed layout v1 (docs/layouts.md).
//
//   Y[M, N] = X[M, K] @ ((U - Z) * S) (+ bias),  FP32 accumulation, X / Y / S / Z / bias in T (half or bfloat16).
//
// One CTA computes a BM x BN tile of Y over the K range of its split (blockIdx.z). Per K tile of 64:
//   * cp.async copies the A tile (BM rows x 128 bytes, 16-byte chunks XOR-swizzled by row so ldmatrix is conflict
//     free), the packed B lines (BN / I lines of 128 bytes, chunk-swizzled by line so the per-lane 32-bit reads of a
//     warp hit 32 different banks), and the one or two scale / zero rows the tile touches, into one of STAGES
//     shared-memory buffers (a multi-stage pipeline, STAGES - 1 tiles in flight);
//   * each lane reads, per n8 tile, the one 32-bit word of the packed line that is exactly its B fragment (the
//     layout's k permutation), converts it in registers with the magic-number conversions below, subtracts the
//     zero point and multiplies by the scale, and feeds mma.sync. No dequantized copy exists anywhere.
// split == 1: the epilogue adds the bias and writes Y. split > 1: it writes FP32 partials to the workspace and
// gemm_splitk_reduce sums them (deterministic order), adds the bias and writes Y.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "../converters.cuh"
#include "../converters_fp6.cuh"
#include "../epilogue.cuh"

namespace trt_woq {
namespace gemm {

constexpr int kBK = 64;  // K tile: one 128-byte line of the packed layout
// Bytes of one packed row per K tile: a 128-byte line; FP6 (layout 2) adds the 64 bytes of its 2-bit words, copied
// right after the 4-bit lines of a stage (unswizzled: a warp's 2-bit reads for one k step already hit 16 banks).
__host__ __device__ constexpr int packed_line_bytes(int bits) { return bits == 6 ? 192 : 128; }

struct GemmArgs {
    const void* a;        // [M, K] T
    const int32_t* b;     // [N / I, K / 2] packed words (FP6: [N / 4, 3 K / 4], the 2-bit words after the 4-bit)
    const void* scales;   // [K / G, N] T
    const void* zeros;    // [K / G, N] T or nullptr (symmetric)
    const void* bias;     // [N] T or nullptr
    void* c;              // [M, N] T   (split == 1)
    float* partials;      // [split, M, N] FP32 (split > 1)
    int m, n, k;
    int group;            // group size along K; K for per-channel
    int group_shift;      // log2(group); 31 for per-channel (every k in group 0)
    int k_tiles_per_split;
    Epilogue ep;          // fused activation (epilogue.cuh), applied where Y is written
};

// ---------------------------------------------------------------------------------------------------------------
// PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy, zero-filled when !valid (src-size 0: nothing is read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}

// 4-byte async copy (scales / zeros rows need only 4-byte alignment: N is even), zero-filled when !valid.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// One channel pair of the scale (and zero) rows that K tile k0 .. k0 + 63 touches, into a stage's rows [2][BN]:
// item i is group row r = i / (BN / 2) (one row when group >= 64, two when group == 32) and pair p = i % (BN / 2).
// Rows past the tile's groups and channels past N are zero-filled.
template <int BN, typename T>
__device__ __forceinline__ void copy_group_rows(T* ss, T* sz, const T* S, const T* Z, int i, int k0, int n0,
                                                const GemmArgs& args) {
    const int g_first = k0 >> args.group_shift, g_last = (k0 + kBK - 1) >> args.group_shift;
    const int r = i / (BN / 2), p = i % (BN / 2);
    const int g = g_first + r, n = n0 + 2 * p;
    const bool ok = g <= g_last && n < args.n;
    const size_t off = ok ? (size_t)g * args.n + n : 0;
    cp_async4(ss + r * BN + 2 * p, S + off, ok);
    if (Z != nullptr) cp_async4(sz + r * BN + 2 * p, Z + off, ok);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// PRMT and LOP3 ((a & b) | c) wrappers shared with the decode kernels' converters.
using trt_woq::detail::and_or;
using trt_woq::detail::prmt;

// ---------------------------------------------------------------------------------------------------------------
// Per-type pieces: the B-fragment conversions. `zq` holds the zero point in the form the conversion needs (see each),
// `s2` the scale broadcast to both halves.
template <typename T>
struct Ops;

template <>
struct Ops<half> {
    using T2 = half2;
    __device__ static T2 bcast(half x) { return __half2half2(x); }
    // INT8: PRMT places bytes e0, e1 (or e2, e3) under the 0x64 exponent: 1024 + e. zq = 1024 + Z, exact in FP16.
    struct Int8Zero {
        half2 z;
    };
    __device__ static Int8Zero int8_zero(float z) { return {__float2half2_rn(1024.f + z)}; }
    __device__ static void int8_to_frag(uint32_t w, Int8Zero zq, half2 s2, uint32_t& b0, uint32_t& b1) {
        uint32_t lo = prmt(w, 0x64646464u, 0x7150u);
        uint32_t hi = prmt(w, 0x64646464u, 0x7352u);
        half2 h0 = __hmul2(__hsub2(*reinterpret_cast<half2*>(&lo), zq.z), s2);
        half2 h1 = __hmul2(__hsub2(*reinterpret_cast<half2*>(&hi), zq.z), s2);
        b0 = *reinterpret_cast<uint32_t*>(&h0);
        b1 = *reinterpret_cast<uint32_t*>(&h1);
    }
    // INT4: (w & 0x000F000F) | 0x64006400 = 1024 + (e0, e1); (w & 0x00F000F0) | 0x64006400 = 1024 + 16 (e2, e3),
    // and fma(x, 1/16, -(64 + Z)) = e - Z exactly. zq.lo = 1024 + Z, zq.hi = -(64 + Z).
    struct Int4Zero {
        half2 lo, hi;
    };
    __device__ static Int4Zero int4_zero(float z) {
        return {__float2half2_rn(1024.f + z), __float2half2_rn(-64.f - z)};
    }
    __device__ static void int4_to_frag(uint32_t w, Int4Zero zq, half2 s2, uint32_t (&b)[4]) {
        const half2 sixteenth = __float2half2_rn(0.0625f);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t v = h ? (w >> 8) : w;
            uint32_t lo = and_or(v, 0x000F000Fu, 0x64006400u);
            uint32_t hi = and_or(v, 0x00F000F0u, 0x64006400u);
            half2 h0 = __hmul2(__hsub2(*reinterpret_cast<half2*>(&lo), zq.lo), s2);
            half2 h1 = __hmul2(__hfma2(*reinterpret_cast<half2*>(&hi), sixteenth, zq.hi), s2);
            b[2 * h] = *reinterpret_cast<uint32_t*>(&h0);
            b[2 * h + 1] = *reinterpret_cast<uint32_t*>(&h1);
        }
    }
};

template <>
struct Ops<__nv_bfloat16> {
    using T2 = __nv_bfloat162;
    __device__ static T2 bcast(__nv_bfloat16 x) { return __bfloat162bfloat162(x); }
    // INT8: each byte under the FP32 exponent of 2^23 (0x4B000000 | e = 8388608 + e); subtracting 8388608 + Z in
    // FP32 is exact, |e - Z| <= 255 is exact in BF16, and PRMT 0x7632 keeps the two high halves (truncation of an
    // exactly representable value). zq = 8388608 + Z.
    struct Int8Zero {
        float z;
    };
    __device__ static Int8Zero int8_zero(float z) { return {8388608.f + z}; }
    __device__ static void int8_to_frag(uint32_t w, Int8Zero zq, __nv_bfloat162 s2, uint32_t& b0, uint32_t& b1) {
        float f[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint32_t u = prmt(w, 0x4B000000u, 0x7650u + i);  // byte i of w, then bytes 1..3 of 0x4B000000
            f[i] = __uint_as_float(u) - zq.z;
        }
        uint32_t lo = prmt(__float_as_uint(f[0]), __float_as_uint(f[1]), 0x7632u);
        uint32_t hi = prmt(__float_as_uint(f[2]), __float_as_uint(f[3]), 0x7632u);
        __nv_bfloat162 h0 = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&lo), s2);
        __nv_bfloat162 h1 = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&hi), s2);
        b0 = *reinterpret_cast<uint32_t*>(&h0);
        b1 = *reinterpret_cast<uint32_t*>(&h1);
    }
    // INT4: BF16 has 7 explicit significand bits, so the nibble is moved to bits 0..3 under the 128.0 base 0x4300
    // (128 + e, unit step from 128 to 256) by shifting the word, not by a wider mask. zq = 128 + Z.
    struct Int4Zero {
        __nv_bfloat162 lo;
    };
    __device__ static Int4Zero int4_zero(float z) { return {__float2bfloat162_rn(128.f + z)}; }
    __device__ static void int4_to_frag(uint32_t w, Int4Zero zq, __nv_bfloat162 s2, uint32_t (&b)[4]) {
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            uint32_t v = and_or(w >> (4 * p), 0x000F000Fu, 0x43004300u);
            __nv_bfloat162 h = __hmul2(__hsub2(*reinterpret_cast<__nv_bfloat162*>(&v), zq.lo), s2);
            b[p] = *reinterpret_cast<uint32_t*>(&h);
        }
    }
};

// FP6 (layout 2): a 4-bit word and its 2-bit word (already rotated as half 0: fp6::as_half0) -> the four pairs in
// int4_to_frag's order. Groups (scaled): value * s, the 2^12 restored first (exact), so value * s rounds once. Per
// channel: value * 2^-12 as converted; the epilogue multiplies the FP32 sums by s * 2^12.
template <typename T>
__device__ __forceinline__ void fp6_to_frag(uint32_t seg4, uint32_t seg2, bool scaled, typename Ops<T>::T2 s2,
                                            uint32_t (&b)[4]) {
    typename Ops<T>::T2 p[4];
    fp6::convert_fp6_word<T, 0>(seg4, seg2, p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (scaled) p[i] = __hmul2(__hmul2(p[i], fp6::bias_pair<T>()), s2);
        b[i] = detail::as_u32(p[i]);
    }
}

// The factor of FP32 sums of channel n: s * 2^12 for FP6 per channel (fp6_to_frag), else 1 (scaled weights).
template <int BITS, typename T>
__device__ __forceinline__ float channel_factor(const GemmArgs& args, int n) {
    if (BITS != 6 || args.group_shift != 31 || n >= args.n) return 1.f;
    return float(static_cast<const T*>(args.scales)[n]) * fp6::kBiasScale;
}
// An output before the activation: sum * factor + bias for FP6, sum + bias for the integer formats.
template <int BITS>
__device__ __forceinline__ float scaled_sum(float sum, float factor, float bias) {
    if constexpr (BITS == 6) return fmaf(sum, factor, bias);
    else return sum + bias;
}

// ---------------------------------------------------------------------------------------------------------------
// CTA rasterization. The launch order (blockIdx.x fastest) is remapped so that a band of kBand M tiles sweeps all N
// tiles before the next band starts: the CTAs resident at one time then share a few activation row bands (which
// stay in L2) and each weight tile is read from DRAM once per band, instead of the whole activation being streamed
// from DRAM once per N tile when it does not fit in L2 (M = 4096, K = 8192: 64 MB).
constexpr int kBand = 8;
// Tile `lin` (launch order) of an mt x nt grid of output tiles.
__device__ __forceinline__ void band_coords(int lin, int mt, int nt, int& m_tile, int& n_tile) {
    const int band = lin / (kBand * nt);
    const int first = band * kBand;
    const int rows = min(mt - first, kBand);
    const int in_band = lin - band * kBand * nt;
    m_tile = first + in_band % rows;
    n_tile = in_band / rows;
}
__device__ __forceinline__ void tile_coords(int& m_tile, int& n_tile) {
    band_coords(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, m_tile, n_tile);
}

// ---------------------------------------------------------------------------------------------------------------
// Shared-memory geometry of one pipeline stage.
template <int BM, int BN, int BITS>
struct StageLayout {
    static constexpr int kI = BITS == 8 ? 2 : 4;          // channels per packed line (layout interleave)
    static constexpr int kLines = BN / kI;                // packed lines per K tile
    static constexpr int kXBytes = BM * kBK * 2;          // BM activation rows x 128 bytes
    static constexpr int kBBytes = kLines * packed_line_bytes(BITS);  // one line per packed row (+ FP6 2-bit)
    static constexpr int kSBytes = 2 * BN * 2;            // up to two group rows of BN values (group 32 < 64)
    static constexpr int kBytes = kXBytes + kBBytes + 2 * kSBytes;  // + zeros
};

// Chunk swizzles (16-byte chunk index within a 128-byte row / line). A: chunk ^ row%8, the usual ldmatrix swizzle.
// B: a warp reads, for one k step, word (lane%4) of chunk c(n) of lines n/I for its 8 channels n; the XOR below
// spreads those 8 chunks over 8 different 4-bank groups (INT8: 4 lines x 2 channels; INT4: 2 lines x 4 channels).
__device__ __forceinline__ int swz_a(int row, int chunk) { return chunk ^ (row & 7); }
template <int BITS>
__device__ __forceinline__ int swz_b(int line, int chunk) {
    return BITS == 8 ? (chunk ^ (line & 3)) : (chunk ^ (line & 1));
}


// This CTA's output tile (band-rasterized, BM tokens x BN channels from m0 / n0) and the K tiles of its split
// (blockIdx.z).
struct CtaTile {
    int m0, n0, kt_begin, kt_end;
};
template <int BM, int BN>
__device__ __forceinline__ CtaTile cta_tile(const GemmArgs& args) {
    int m_tile, n_tile;
    tile_coords(m_tile, n_tile);
    CtaTile t;
    t.m0 = m_tile * BM;
    t.n0 = n_tile * BN;
    const int k_tiles = args.k / kBK;
    t.kt_begin = blockIdx.z * args.k_tiles_per_split;
    t.kt_end = min(k_tiles, t.kt_begin + args.k_tiles_per_split);
    return t;
}

// Stage s of a cp.async pipeline laid out as L (StageLayout, WgStage): activation tile, packed lines, scale rows,
// zero rows, L::kBytes per stage.
template <typename T, typename L>
struct Stages {
    unsigned char* base;
    __device__ __forceinline__ unsigned char* at(int st, int off) const { return base + st * L::kBytes + off; }
    __device__ __forceinline__ T* x(int st) const { return reinterpret_cast<T*>(at(st, 0)); }
    __device__ __forceinline__ uint32_t* b(int st) const { return reinterpret_cast<uint32_t*>(at(st, L::kXBytes)); }
    __device__ __forceinline__ T* s(int st) const { return reinterpret_cast<T*>(at(st, L::kXBytes + L::kBBytes)); }
    __device__ __forceinline__ T* z(int st) const {
        return reinterpret_cast<T*>(at(st, L::kXBytes + L::kBBytes + L::kSBytes));
    }
};

// Copy iterations of the 4-bit / INT8 lines in tile_copies; FP6's 2-bit words take the iterations after them.
template <int LINES, int THREADS>
__host__ __device__ constexpr int four_bit_iters() { return (LINES * 8 + THREADS - 1) / THREADS; }
template <int BITS, int LINES, int THREADS>
__host__ __device__ constexpr int line_iters() {
    return four_bit_iters<LINES, THREADS>() + (BITS == 6 ? (LINES * 4 + THREADS - 1) / THREADS : 0);
}

// One thread's cp.async copies of a K tile, the same for every K tile and so set up once, outside the K loop:
// ROWS activation rows (128 bytes, chunks swizzled by row) and LINES packed lines (128 bytes, chunks swizzled by
// line) split over THREADS threads: source pointers, swizzled shared-memory offsets and validity bits (M and N tails
// are zero-filled). ALL_LINES: LINES * 8 is a multiple of THREADS; else b_dst = -1 where a thread has no line in
// that iteration. FP6: iterations from four_bit_iters on copy the 2-bit words (4 chunks per row, after the row's
// K / 2 four-bit words; in shared memory after the LINES lines, line-major, unswizzled). Separate arrays rather than
// one struct: as members of one object ptxas scheduled the kernels differently (10-20 % slower wgmma kernels on
// H100).
template <bool ALL_LINES, int LINES, int THREADS, int BITS, typename T, int NX, int NB>
__device__ __forceinline__ void tile_copies(const GemmArgs& args, int tid, int m0, int n0, const T* (&x_src)[NX],
                                            int (&x_dst)[NX], uint32_t& x_ok, const int32_t* (&b_src)[NB],
                                            int (&b_dst)[NB], uint32_t& b_ok) {
    constexpr int kI = BITS == 8 ? 2 : 4;
    static_assert(BITS != 6 || LINES * 8 % THREADS == 0, "FP6: the 2-bit chunks start at a whole iteration");
    const T* __restrict__ A = static_cast<const T*>(args.a);
    const int lines_total = args.n / kI;
    const int words_per_line = BITS == 6 ? args.k / 4 * 3 : args.k / 2;
#pragma unroll
    for (int it = 0; it < NX; ++it) {
        const int i = tid + it * THREADS, row = i >> 3, ch = i & 7;
        const bool ok = m0 + row < args.m;
        x_ok |= uint32_t(ok) << it;
        x_src[it] = A + (size_t)(ok ? m0 + row : 0) * args.k + ch * 8;
        x_dst[it] = row * kBK + swz_a(row, ch) * 8;
    }
#pragma unroll
    for (int it = 0; it < NB; ++it) {
        const bool two = it >= four_bit_iters<LINES, THREADS>();  // FP6's 2-bit words
        const int i = tid + (two ? it - four_bit_iters<LINES, THREADS>() : it) * THREADS;
        const int line = two ? i >> 2 : i >> 3, ch = two ? i & 3 : i & 7;
        const int gl = n0 / kI + line;
        const bool in = two ? i < LINES * 4 : ALL_LINES || i < LINES * 8;
        const bool ok = in && gl < lines_total;
        b_ok |= uint32_t(ok) << it;
        b_src[it] = args.b + (size_t)(ok ? gl : 0) * words_per_line + (two ? args.k / 2 : 0) + ch * 4;
        b_dst[it] = !in ? -1 : two ? LINES * 32 + line * 16 + ch * 4 : line * 32 + swz_b<BITS>(line, ch) * 4;
    }
}
// Issues K tile kt's copies (tile_copies) into stage s. Copy iterations from FOUR_BIT on are FP6's 2-bit words:
// 16 words per K tile.
template <bool ALL_LINES, int FOUR_BIT = 32, typename T, typename L, int NX, int NB>
__device__ __forceinline__ void issue_copies(const Stages<T, L>& stg, int s, int kt, const T* const (&x_src)[NX],
                                             const int (&x_dst)[NX], uint32_t x_ok, const int32_t* const (&b_src)[NB],
                                             const int (&b_dst)[NB], uint32_t b_ok) {
    const int k0 = kt * kBK;
    T* sx = stg.x(s);
#pragma unroll
    for (int it = 0; it < NX; ++it) cp_async16(sx + x_dst[it], x_src[it] + k0, (x_ok >> it) & 1);
    uint32_t* sb = stg.b(s);
#pragma unroll
    for (int it = 0; it < NB; ++it)
        if (ALL_LINES || b_dst[it] >= 0)
            cp_async16(sb + b_dst[it], b_src[it] + kt * (it < FOUR_BIT ? 32 : 16), (b_ok >> it) & 1);
}

template <int BM, int BN, int WM, int WN, int STAGES, int BITS, typename T, int MIN_CTAS = 1>
__global__ void __launch_bounds__(WM* WN * 32, MIN_CTAS) gemm_mma_kernel(const GemmArgs args) {
    using L = StageLayout<BM, BN, BITS>;
    using O = Ops<T>;
    using T2 = typename O::T2;
    constexpr int kThreads = WM * WN * 32;
    constexpr int kWarpM = BM / WM, kWarpN = BN / WN;
    constexpr int kMT = kWarpM / 16, kNT = kWarpN / 8;
    constexpr int kI = L::kI;
    static_assert(kWarpM % 16 == 0 && kWarpN % 8 == 0, "warp tile must be a multiple of the mma shape");

    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / WN, warp_n = warp % WN;
    const CtaTile ct = cta_tile<BM, BN>(args);
    const int m0 = ct.m0, n0 = ct.n0, kt_begin = ct.kt_begin, kt_end = ct.kt_end;
    const bool has_zeros = args.zeros != nullptr;
    const T* __restrict__ S = static_cast<const T*>(args.scales);
    const T* __restrict__ Z = static_cast<const T*>(args.zeros);
    const Stages<T, L> stg{smem};
    constexpr int kXIters = BM * 8 / kThreads, kBIters = line_iters<BITS, L::kLines, kThreads>();
    constexpr int kFourBit = four_bit_iters<L::kLines, kThreads>();
    static_assert(BM * 8 % kThreads == 0 && L::kLines * 8 % kThreads == 0, "copy split must be exact");
    const T* x_src[kXIters];
    const int32_t* b_src[kBIters];
    int x_dst[kXIters], b_dst[kBIters];
    uint32_t x_ok = 0, b_ok = 0;
    tile_copies<BITS != 6, L::kLines, kThreads, BITS>(args, tid, m0, n0, x_src, x_dst, x_ok, b_src, b_dst, b_ok);
    auto load_stage = [&](int s, int kt) {
        issue_copies<BITS != 6, kFourBit>(stg, s, kt, x_src, x_dst, x_ok, b_src, b_dst, b_ok);
        for (int i = tid; i < BN; i += kThreads)
            copy_group_rows<BN>(stg.s(s), stg.z(s), S, Z, i, kt * kBK, n0, args);
    };

    float acc[kMT][kNT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (kt_begin + s < kt_end) load_stage(s, kt_begin + s);
        cp_async_commit();
    }

    const auto zq_sym8 = O::int8_zero(128.f);  // symmetric zero points 2^(bits-1)
    const auto zq_sym4 = O::int4_zero(8.f);
    // Group of k: k >> group_shift (group sizes are powers of two; per-channel uses shift 31, i.e. group 0).
    const int gshift = args.group_shift;
    const bool fp6_scaled = gshift != 31;  // FP6 groups scale the weights; per channel, the epilogue the sums

    // Register double buffering (the CUTLASS multistage pattern): the A fragments and packed B words of the next
    // k16 step are read from shared memory while the mma of the current step run, and at the last step of a tile
    // the first fragments of the next tile, so the tensor cores never wait for a shared-memory load at a tile
    // boundary. A packed word covers kSPW k16 steps (INT8 1, INT4 2); it is converted at the first of them.
    constexpr int kSPW = BITS == 8 ? 1 : 2;
    constexpr int kSteps = kBK / 16;
    const int a_row = warp_m * kWarpM + (lane & 15);
    const int a_ch = lane >> 4;
    int b_off[kNT];  // word offset of this lane's word for block 0 (before the chunk swizzle), per n8 tile
    int b_line[kNT];
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
        const int nl = warp_n * kWarpN + j * 8 + (lane >> 2);
        b_line[j] = nl / kI;
        b_off[j] = (nl % kI) * (4 / kSPW);
    }

    uint32_t afrag[2][kMT][4];
    uint32_t braw[2][kNT];
    uint32_t braw2[2][BITS == 6 ? kNT : 1];  // FP6: the 2-bit words, rotated as half 0
    // Scale (zero) of this lane's channel for the tile's first and second group row, as raw 16-bit patterns in
    // separate arrays so the per-block choice is a select, not a dynamically indexed (local-memory) array.
    uint16_t sc0[kNT], sc1[kNT], zc0[kNT], zc1[kNT];
    uint32_t bfrag[kNT][2 * kSPW];
    int tile_groups = 0;       // bit b: block b of the current tile uses the second group row (group 32 only)

    auto load_a = [&](const T* sa, int ks, uint32_t (&dst)[kMT][4]) {
#pragma unroll
        for (int i = 0; i < kMT; ++i) {
            const int row = a_row + i * 16;
            ldmatrix_x4(dst[i], sa + row * kBK + swz_a(row, ks * 2 + a_ch) * 8);
        }
    };
    auto load_b = [&](const uint32_t* sb, int blk, uint32_t (&dst)[kNT], uint32_t (&dst2)[BITS == 6 ? kNT : 1]) {
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
            dst[j] = sb[b_line[j] * 32 + swz_b<BITS>(b_line[j], b_off[j] + blk) * 4 + (lane & 3)];
            // 2-bit word v serves 4-bit words 2v (half 0) and 2v + 1 (half 1) of the same row.
            if constexpr (BITS == 6)
                dst2[j] = fp6::as_half0(
                    sb[L::kLines * 32 + b_line[j] * 16 + (b_off[j] + blk) * 2 + ((lane >> 1) & 1)], lane & 1);
        }
    };
    auto load_scales = [&](int s, int kt) {
        const T* ss = stg.s(s);
        const T* sz = stg.z(s);
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
            const int nl = warp_n * kWarpN + j * 8 + (lane >> 2);
            const uint16_t* ss16 = reinterpret_cast<const uint16_t*>(ss);
            const uint16_t* sz16 = reinterpret_cast<const uint16_t*>(sz);
            sc0[j] = ss16[nl];
            sc1[j] = ss16[BN + nl];
            if (has_zeros) {
                zc0[j] = sz16[nl];
                zc1[j] = sz16[BN + nl];
            }
        }
        const int k0 = kt * kBK, g0 = k0 >> gshift;
        tile_groups = 0;
#pragma unroll
        for (int b = 0; b < kSteps / kSPW; ++b)
            tile_groups |= (((k0 + b * 16 * kSPW) >> gshift) != g0) << b;
    };
    auto convert = [&](int blk, const uint32_t (&raw)[kNT], const uint32_t (&raw2)[BITS == 6 ? kNT : 1]) {
        const int r = (tile_groups >> blk) & 1;
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
            const uint16_t sbits = r ? sc1[j] : sc0[j];
            const T2 s2 = O::bcast(*reinterpret_cast<const T*>(&sbits));
            if constexpr (BITS == 8) {
                const uint16_t zbits = r ? zc1[j] : zc0[j];
                const auto zq = has_zeros ? O::int8_zero(float(*reinterpret_cast<const T*>(&zbits))) : zq_sym8;
                O::int8_to_frag(raw[j], zq, s2, bfrag[j][0], bfrag[j][1]);
            } else if constexpr (BITS == 6) {
                fp6_to_frag<T>(raw[j], raw2[j], fp6_scaled, s2, bfrag[j]);
            } else {
                const uint16_t zbits = r ? zc1[j] : zc0[j];
                const auto zq = has_zeros ? O::int4_zero(float(*reinterpret_cast<const T*>(&zbits))) : zq_sym4;
                O::int4_to_frag(raw[j], zq, s2, bfrag[j]);
            }
        }
    };

    if (kt_begin < kt_end) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        load_a(stg.x(0), 0, afrag[0]);
        load_b(stg.b(0), 0, braw[0], braw2[0]);
        load_scales(0, kt_begin);
    }
    for (int kt = kt_begin; kt < kt_end; ++kt) {
        const int s = (kt - kt_begin) % STAGES;
        const T* sa = stg.x(s);
        const uint32_t* sb = stg.b(s);
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks) {
            if (ks % kSPW == 0) convert(ks / kSPW, braw[(ks / kSPW) & 1], braw2[(ks / kSPW) & 1]);
            if (ks + 1 < kSteps) {
                load_a(sa, ks + 1, afrag[(ks + 1) & 1]);
                if ((ks + 1) % kSPW == 0)
                    load_b(sb, (ks + 1) / kSPW, braw[((ks + 1) / kSPW) & 1], braw2[((ks + 1) / kSPW) & 1]);
            } else {
                // Tile kt + 1 must have landed (S - 3 younger groups may still fly); after the barrier every
                // thread is done reading tile kt - 1's buffer (and tile kt's), so refilling it is safe.
                cp_async_wait<STAGES - 3>();
                __syncthreads();
                const int next = kt + STAGES - 1;
                if (next < kt_end) load_stage((next - kt_begin) % STAGES, next);
                cp_async_commit();
                if (kt + 1 < kt_end) {
                    const int s1 = (kt + 1 - kt_begin) % STAGES;
                    load_a(stg.x(s1), 0, afrag[0]);
                    load_b(stg.b(s1), 0, braw[0], braw2[0]);
                }
            }
            const int st = ks % kSPW;
#pragma unroll
            for (int i = 0; i < kMT; ++i)
#pragma unroll
                for (int j = 0; j < kNT; ++j)
                    mma_m16n8k16<T>(acc[i][j], afrag[ks & 1][i][0], afrag[ks & 1][i][1], afrag[ks & 1][i][2],
                                    afrag[ks & 1][i][3], bfrag[j][2 * st], bfrag[j][2 * st + 1]);
        }
        // The next tile's scales: read after this tile's last conversion (above), before its first.
        if (kt + 1 < kt_end) load_scales((kt + 1 - kt_begin) % STAGES, kt + 1);
    }
    cp_async_wait<0>();

    // Epilogue. Fragment element e of acc[i][j]: row lane/4 (+8 for e >= 2), columns 2 (lane%4) + {0, 1}.
    const T* bias = static_cast<const T*>(args.bias);
    visit_epilogue(args.ep, [&](auto kind) {
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
            const int n = n0 + warp_n * kWarpN + j * 8 + 2 * (lane & 3);
            if (n >= args.n) continue;  // N is even, so n < N implies n + 1 < N
            float b0 = 0.f, b1 = 0.f;
            if (bias != nullptr && args.partials == nullptr) {
                b0 = float(bias[n]);
                b1 = float(bias[n + 1]);
            }
            const float f0 = channel_factor<BITS, T>(args, n), f1 = channel_factor<BITS, T>(args, n + 1);
#pragma unroll
            for (int i = 0; i < kMT; ++i) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int m = m0 + warp_m * kWarpM + i * 16 + (lane >> 2) + 8 * h;
                    if (m >= args.m) continue;
                    const float v0 = scaled_sum<BITS>(acc[i][j][2 * h], f0, b0);
                    const float v1 = scaled_sum<BITS>(acc[i][j][2 * h + 1], f1, b1);
                    if (args.partials == nullptr) {
                        T2 out;
                        out.x = T(apply_epilogue_kind<decltype(kind)::value>(v0, args.ep));
                        out.y = T(apply_epilogue_kind<decltype(kind)::value>(v1, args.ep));
                        *reinterpret_cast<T2*>(static_cast<T*>(args.c) + (size_t)m * args.n + n) = out;
                    } else {
                        float* p = args.partials + ((size_t)blockIdx.z * args.m + m) * args.n + n;
                        *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
                    }
                }
            }
        }
    });
}

// Sums the split partials in split order (deterministic), adds the bias, converts. One thread per output pair.
template <typename T>
__global__ void gemm_splitk_reduce(const float* __restrict__ partials, const T* __restrict__ bias, T* __restrict__ c,
                                   int m, int n, int split, Epilogue ep) {
    using T2 = typename Ops<T>::T2;
    const size_t pairs = (size_t)m * n / 2;
    const size_t plane = (size_t)m * n;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < pairs; p += (size_t)gridDim.x * blockDim.x) {
        float2 sum = make_float2(0.f, 0.f);
        for (int z = 0; z < split; ++z) {
            const float2 v = reinterpret_cast<const float2*>(partials + z * plane)[p];
            sum.x += v.x;
            sum.y += v.y;
        }
        if (bias != nullptr) {
            const int col = (int)((2 * p) % n);
            sum.x += float(bias[col]);
            sum.y += float(bias[col + 1]);
        }
        T2 out;
        out.x = T(apply_epilogue(sum.x, ep));
        out.y = T(apply_epilogue(sum.y, ep));
        reinterpret_cast<T2*>(c)[p] = out;
    }
}

}  // namespace gemm
}  // namespace trt_woq
