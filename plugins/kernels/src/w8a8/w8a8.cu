/*
 * W8A8 (act_mode TRT_WOQ_ACT_MODE_W8A8_DYNAMIC): activations quantized to INT8 per row block on the fly, an
 * INT8 x INT8 -> INT32 tensor-core GEMM on the packed INT8 weights of layout 1, and a dequantizing epilogue.
 * docs/kernels_w8a8.md describes it; graph_passes/quantizers/activations.py is the reference of the quantize step.
 *
 *   quantize_rows: reads each row of X once, writes codes (int8, in layout 1's k order), scales and offsets (fp32)
 *                  into the workspace. Every float step is an explicitly rounded IEEE op (no FMA contraction), so
 *                  the codes equal the numpy reference's bit for bit.
 *   gemm_s8:       mma.sync.m16n8k32 s8 (SM80+) on the packed bytes (U ^ 0x80 = the signed code q = U - 128),
 *                  cp.async multi-stage pipeline; per K group g it adds
 *                  s_a[m, g] * s_w[g, n] * C_g[m, n] (+ o_a[m, g] * weight_sums[g, n] * s_w[g, n]) in FP32.
 *   gemm_s8_ws:    SM90a, per-channel weights: warp-specialized wgmma s8 x u8 with both operands fed by TMA into an
 *                  mbarrier pipeline, persistent grid with a K split of the last wave, optionally a programmatic
 *                  dependent launch after the quantize kernel (the dispatch's SM90 path).
 *   gemm_s8_wgmma: SM90a, the same product fed by cp.async from every thread (by candidate id only).
 *   M <= 16:       the INT8 weight-only GEMV on the same packed weights and scales (no activation quantization).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <cuda.h>           // CUtensorMap
#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <atomic>

#include "../candidates.h"
#include "../epilogue.cuh"
#include "../pdl.cuh"
#include "../gemm/gemm_wgmma_ws.cuh"  // cp.async / ldmatrix / wgmma / mbarrier / TMA / setmaxnreg, rasterization

namespace trt_woq {
namespace w8a8 {
namespace {

using gemm::cp_async16;
using gemm::cp_async_commit;
using gemm::cp_async_wait;
using gemm::ldmatrix_x4;
using gemm::tile_coords;

constexpr int kSmallM = 16;      // M <= 16 runs the weight-only GEMV
constexpr int kQThreads = 256;   // quantize kernel CTA
constexpr int kBK = 64;          // K tile: one 128-byte line of the packed layout (two INT8 channels)
constexpr int kStages = 4;

// ---------------------------------------------------------------------------------------------------------------
// Quantize. A thread owns chunks of 16 consecutive k (one permutation block of layout 1, docs/layouts.md step 2) and
// writes their codes in the block's position order: position j holds k = kPerm16[j]. The GEMM then multiplies code
// bytes position by position, in the same order as the weight bytes, and group boundaries (multiples of 32) stay put.

// 16 values from their two 16-byte words.
template <typename T>
__device__ __forceinline__ void convert16(const uint4 (&w)[2], float (&v)[16]) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(w);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        float2 f;
        if constexpr (sizeof(T) == 2 && std::is_same<T, half>::value) {
            f = __half22float2(*reinterpret_cast<const half2*>(&u[i]));
        } else {
            f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u[i]));
        }
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

template <typename T>
__device__ __forceinline__ void load16(const T* src, float (&v)[16]) {
    const uint4* p = reinterpret_cast<const uint4*>(src);
    const uint4 w[2] = {p[0], p[1]};
    convert16<T>(w, v);
}

template <bool ASYM>
struct Range {
    float hi, lo;  // max |x| (lo unused) or max x / min x
    __device__ void init() { hi = ASYM ? -INFINITY : 0.f; lo = INFINITY; }
    __device__ void add(float x) {
        if (ASYM) { hi = fmaxf(hi, x); lo = fminf(lo, x); } else { hi = fmaxf(hi, fabsf(x)); }
    }
    __device__ void merge(const Range& o) { hi = fmaxf(hi, o.hi); lo = fminf(lo, o.lo); }
    __device__ void shfl_xor(int lanes) {
        for (int d = 1; d < lanes; d <<= 1) {
            Range o{__shfl_xor_sync(0xffffffffu, hi, d), __shfl_xor_sync(0xffffffffu, lo, d)};
            merge(o);
        }
    }
    // Scale and offset: the float32 steps of graph_passes/quantizers/activations.py, each rounded once.
    __device__ void params(float& s, float& o) const {
        if (ASYM) {
            s = __fdiv_rn(__fsub_rn(hi, lo), 255.f);
            o = __fadd_rn(lo, __fmul_rn(128.f, s));
        } else {
            s = __fdiv_rn(hi, 127.f);
            o = 0.f;
        }
    }
};

// Codes of 16 values in layout order; `sum` gets their sum.
template <bool ASYM>
__device__ __forceinline__ uint4 codes16(const float (&v)[16], float s, float o, int& sum) {
    constexpr int kPerm16[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
    const float div = s == 0.f ? 1.f : s;
    const int qmin = ASYM ? -128 : -127;
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        int q = __float2int_rn(__fdiv_rn(__fsub_rn(v[kPerm16[j]], o), div));
        q = min(max(q, qmin), 127);
        sum += q;
        w[j / 4] |= (uint32_t)(q & 0xff) << (8 * (j % 4));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Blocks of 32..256 k, a power of two (grouped weights, or a short row): one pass; a block's chunks sit on adjacent
// lanes.
template <typename T, bool ASYM>
__global__ void __launch_bounds__(kQThreads) quantize_blocks(const T* __restrict__ x, int8_t* __restrict__ q,
                                                             float* __restrict__ scales, float* __restrict__ offsets,
                                                             int* __restrict__ sums, int k, int block,
                                                             unsigned* zero, int zero_count) {
    // The GEMM (a programmatic launch) may start, its prologue overlapping this grid; its tail-split counters are
    // zeroed here (no memset node of their own).
    pdl_launch_dependents_clearing(zero, zero_count);
    const int row = blockIdx.x, chunks = k / 16, cpb = block / 16;
    const T* xr = x + (size_t)row * k;
    for (int base = 0; base < chunks; base += kQThreads) {
        const int c = base + threadIdx.x;
        const bool active = c < chunks;  // whole blocks are active or not: chunks % cpb == 0, 256 % cpb == 0
        float v[16];
        Range<ASYM> r;
        r.init();
        if (active) {
            load16(xr + c * 16, v);
#pragma unroll
            for (int j = 0; j < 16; ++j) r.add(v[j]);
        }
        r.shfl_xor(cpb);
        float s, o;
        r.params(s, o);
        int sum = 0;
        if (active) *reinterpret_cast<uint4*>(q + (size_t)row * k + c * 16) = codes16<ASYM>(v, s, o, sum);
        for (int d = 1; d < cpb; d <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
        if (active && c % cpb == 0) {
            const size_t g = (size_t)row * (k / block) + c / cpb;
            scales[g] = s;
            offsets[g] = o;
            sums[g] = sum;
        }
    }
}

// One block per row (per-channel weights, other K): a CTA reduction, then the codes. HELD > 0: the row fits in
// HELD chunks per thread (K <= HELD * 16 * kQThreads), whose words stay in registers, all loads in flight at once: X
// is read once. HELD = 0: longer rows are read a second time (from L1/L2) to quantize them.
template <typename T, bool ASYM, int HELD>
__global__ void __launch_bounds__(kQThreads) quantize_rows(const T* __restrict__ x, int8_t* __restrict__ q,
                                                           float* __restrict__ scales, float* __restrict__ offsets,
                                                           int* __restrict__ sums, int k, unsigned* zero,
                                                           int zero_count) {
    // The GEMM (a programmatic launch) may start, its prologue overlapping this grid; its tail-split counters are
    // zeroed here (no memset node of their own).
    pdl_launch_dependents_clearing(zero, zero_count);
    __shared__ float red[2][kQThreads / 32];
    __shared__ int red_sum[kQThreads / 32];
    const int row = blockIdx.x, chunks = k / 16, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const T* xr = x + (size_t)row * k;
    Range<ASYM> r;
    r.init();
    uint4 held[HELD > 0 ? HELD : 1][2];
    if constexpr (HELD > 0) {
#pragma unroll
        for (int i = 0; i < HELD; ++i) {
            const int c = threadIdx.x + i * kQThreads;
            if (c < chunks) {
                const uint4* src = reinterpret_cast<const uint4*>(xr + c * 16);
                held[i][0] = src[0];
                held[i][1] = src[1];
            }
        }
#pragma unroll
        for (int i = 0; i < HELD; ++i) {
            if (threadIdx.x + i * kQThreads < chunks) {
                float v[16];
                convert16<T>(held[i], v);
#pragma unroll
                for (int j = 0; j < 16; ++j) r.add(v[j]);
            }
        }
    } else {
        for (int c = threadIdx.x; c < chunks; c += kQThreads) {
            float v[16];
            load16(xr + c * 16, v);
#pragma unroll
            for (int j = 0; j < 16; ++j) r.add(v[j]);
        }
    }
    r.shfl_xor(32);
    if (lane == 0) {
        red[0][warp] = r.hi;
        red[1][warp] = r.lo;
    }
    __syncthreads();
    r = Range<ASYM>{red[0][lane % (kQThreads / 32)], red[1][lane % (kQThreads / 32)]};
    r.shfl_xor(kQThreads / 32);
    float s, o;
    r.params(s, o);
    int sum = 0;
    if constexpr (HELD > 0) {
#pragma unroll
        for (int i = 0; i < HELD; ++i) {
            const int c = threadIdx.x + i * kQThreads;
            if (c < chunks) {
                float v[16];
                convert16<T>(held[i], v);
                *reinterpret_cast<uint4*>(q + (size_t)row * k + c * 16) = codes16<ASYM>(v, s, o, sum);
            }
        }
    } else {
        for (int c = threadIdx.x; c < chunks; c += kQThreads) {
            float v[16];
            load16(xr + c * 16, v);
            *reinterpret_cast<uint4*>(q + (size_t)row * k + c * 16) = codes16<ASYM>(v, s, o, sum);
        }
    }
    for (int d = 1; d < 32; d <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, d);
    if (lane == 0) red_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kQThreads / 32; ++w) sum += red_sum[w];
        scales[row] = s;
        offsets[row] = o;
        sums[row] = sum;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// GEMM. CTA tile BM x BN, warps WARPS_M x WARPS_N, K tile 64. Shared memory per stage: A BM rows of 64 code bytes;
// B BN / 2 packed lines of 128 bytes (64 k of two channels, layout 1 step 4). Swizzles (16-byte chunk index):
// A chunk ^ (row / 2) % 4 (two 64-byte rows per 128-byte bank line), B chunk ^ line % 8; both make one ldmatrix
// (8 rows or 8 channels at one k chunk) touch 8 different 4-bank groups.
struct GemmArgs {
    const int8_t* a;         // [M, K] codes (workspace)
    const float* a_scales;   // [M, groups]
    const float* a_offsets;  // [M, groups]
    const int8_t* b;         // packed weights, as bytes: line n / 2, 2K bytes per line
    const void* scales;      // [groups, N] T
    const int* weight_sums;  // [groups, N] or nullptr (symmetric activations)
    const void* bias;        // [N] T or nullptr
    void* c;                 // [M, N] T
    int m, n, k, groups, ksteps_per_group;  // ksteps of 32 k
    Epilogue act;            // fused activation after the bias
};

__device__ __forceinline__ int swz_a(int row, int chunk) { return chunk ^ ((row >> 1) & 3); }
__device__ __forceinline__ int swz_b(int line, int chunk) { return chunk ^ (line & 7); }

__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T>
__device__ __forceinline__ float to_float(T v) {
    if constexpr (std::is_same<T, half>::value) return __half2float(v); else return __bfloat162float(v);
}

template <int BM, int BN, int WARPS_M, int WARPS_N, typename T, bool ASYM>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32) gemm_s8(const GemmArgs args) {
    constexpr int kThreads = WARPS_M * WARPS_N * 32;
    constexpr int kWM = BM / WARPS_M, kWN = BN / WARPS_N, kMI = kWM / 16, kNJ = kWN / 8;
    constexpr int kABytes = BM * kBK, kBBytes = BN / 2 * 128, kStageBytes = kABytes + kBBytes;
    constexpr int kAIters = BM * 4 / kThreads, kBIters = BN / 2 * 8 / kThreads;
    static_assert(kAIters >= 1 && kBIters >= 1 && kWM % 16 == 0 && kWN % 8 == 0, "tile shape");
    extern __shared__ __align__(128) uint8_t smem[];

    int m_tile, n_tile;
    tile_coords(m_tile, n_tile);
    const int m0 = m_tile * BM, n0 = n_tile * BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int k_tiles = args.k / kBK;
    const size_t line_bytes = (size_t)args.k * 2;

    auto load_tile = [&](int stage, int kt) {
        uint8_t* sa = smem + stage * kStageBytes;
        uint8_t* sb = sa + kABytes;
#pragma unroll
        for (int it = 0; it < kAIters; ++it) {
            const int i = tid + it * kThreads, row = i / 4, chunk = i % 4;
            const bool ok = m0 + row < args.m;
            const int8_t* src = args.a + (ok ? (size_t)(m0 + row) * args.k + kt * kBK + chunk * 16 : 0);
            cp_async16(sa + row * kBK + swz_a(row, chunk) * 16, src, ok);
        }
#pragma unroll
        for (int it = 0; it < kBIters; ++it) {
            const int i = tid + it * kThreads, line = i / 8, chunk = i % 8;
            const bool ok = n0 / 2 + line < args.n / 2;
            const int8_t* src = args.b + (ok ? (size_t)(n0 / 2 + line) * line_bytes + kt * 128 + chunk * 16 : 0);
            cp_async16(sb + line * 128 + swz_b(line, chunk) * 16, src, ok);
        }
    };

    int acc[kMI][kNJ][4];
    float out[kMI][kNJ][4];
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
        for (int j = 0; j < kNJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                acc[i][j][r] = 0;
                out[i][j][r] = 0.f;
            }

    // Adds group g's integer sums, dequantized, to `out` and clears them.
    auto flush = [&](int g) {
        float sa[kMI][2], oa[kMI][2];
#pragma unroll
        for (int i = 0; i < kMI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = min(m0 + wm * kWM + i * 16 + lane / 4 + 8 * h, args.m - 1);
                sa[i][h] = __ldg(args.a_scales + (size_t)m * args.groups + g);
                oa[i][h] = ASYM ? __ldg(args.a_offsets + (size_t)m * args.groups + g) : 0.f;
            }
        const T* sw_row = static_cast<const T*>(args.scales) + (size_t)g * args.n;
#pragma unroll
        for (int j = 0; j < kNJ; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int n = min(n0 + wn * kWN + j * 8 + (lane % 4) * 2 + e, args.n - 1);
                const float sw = to_float(sw_row[n]);
                const float corr = ASYM ? (float)__ldg(args.weight_sums + (size_t)g * args.n + n) * sw : 0.f;
#pragma unroll
                for (int i = 0; i < kMI; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        float& y = out[i][j][2 * h + e];
                        y += sa[i][h] * (sw * (float)acc[i][j][2 * h + e]);
                        if (ASYM) y += oa[i][h] * corr;
                        acc[i][j][2 * h + e] = 0;
                    }
            }
    };

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < k_tiles) load_tile(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        if (kt + kStages - 1 < k_tiles) load_tile((kt + kStages - 1) % kStages, kt + kStages - 1);
        cp_async_commit();
        const uint8_t* sa = smem + (kt % kStages) * kStageBytes;
        const uint8_t* sb = sa + kABytes;
        uint32_t bf[kNJ][4];
#pragma unroll
        for (int j = 0; j < kNJ; ++j) {  // channels n .. n + 7 at k chunks 0..3 (both k32 steps)
            const int n = wn * kWN + j * 8 + lane % 8, line = n / 2, chunk = (n % 2) * 4 + lane / 8;
            ldmatrix_x4(bf[j], sb + line * 128 + swz_b(line, chunk) * 16);
#pragma unroll
            for (int r = 0; r < 4; ++r) bf[j][r] ^= 0x80808080u;  // U = q + 128 -> signed q, per byte
        }
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
#pragma unroll
            for (int i = 0; i < kMI; ++i) {
                uint32_t af[4];
                const int row = wm * kWM + i * 16 + lane % 8 + ((lane / 8) % 2) * 8, chunk = ks * 2 + lane / 16;
                ldmatrix_x4(af, sa + row * kBK + swz_a(row, chunk) * 16);
#pragma unroll
                for (int j = 0; j < kNJ; ++j) mma_s8(acc[i][j], af, bf[j][2 * ks], bf[j][2 * ks + 1]);
            }
            const int kstep = kt * 2 + ks;
            if ((kstep + 1) % args.ksteps_per_group == 0) flush(kstep / args.ksteps_per_group);
        }
    }
    cp_async_wait<0>();

    const T* bias = static_cast<const T*>(args.bias);
    T* c = static_cast<T*>(args.c);
    visit_epilogue(args.act, [&](auto kind) {
        constexpr int EPI = decltype(kind)::value;
#pragma unroll
        for (int j = 0; j < kNJ; ++j) {
            const int n = n0 + wn * kWN + j * 8 + (lane % 4) * 2;
            if (n >= args.n) continue;  // N is even: n < N implies n + 1 < N
            const float b0 = bias ? to_float(bias[n]) : 0.f, b1 = bias ? to_float(bias[n + 1]) : 0.f;
#pragma unroll
            for (int i = 0; i < kMI; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int m = m0 + wm * kWM + i * 16 + lane / 4 + 8 * h;
                    if (m >= args.m) continue;
                    T pair[2];
                    const float y0 = apply_epilogue_kind<EPI>(out[i][j][2 * h] + b0, args.act);
                    const float y1 = apply_epilogue_kind<EPI>(out[i][j][2 * h + 1] + b1, args.act);
                    if constexpr (std::is_same<T, half>::value) {
                        *reinterpret_cast<half2*>(pair) = __floats2half2_rn(y0, y1);
                    } else {
                        *reinterpret_cast<__nv_bfloat162*>(pair) = __floats2bfloat162_rn(y0, y1);
                    }
                    *reinterpret_cast<uint32_t*>(c + (size_t)m * args.n + n) = *reinterpret_cast<uint32_t*>(pair);
                }
        }
    });
}

// ---------------------------------------------------------------------------------------------------------------
// SM90a GEMM (per-channel weights): wgmma m64nBNk32 with both operands in shared memory. A = the activation codes
// (s8, tokens as wgmma's M, 64 per warpgroup), B = the weight bytes U as stored (u8, channels as N): the product is
// C' = sum a * U = C + 128 * sum a, so the epilogue subtracts 128 times the row sum the quantize kernel wrote.
// Both tiles are K-major with 128-byte rows (128 k) and the 128-byte swizzle (chunk c of row r at c ^ r % 8); a
// weight row is gathered from its channel's two 64-byte halves of packed lines (layout 1 step 4) by the cp.async
// copies. Pipeline as gemm_wgmma.cuh: STAGES buffers, STAGES - 2 tiles in flight, one wgmma group in flight.
constexpr int kWgBK = 128, kWgStages = 4;

template <int BN>
struct WgmmaS8;
template <>
struct WgmmaS8<128> {
    __device__ static void run(int (&d)[64], uint64_t da, uint64_t db, int accumulate) {
#ifdef TRT_WOQ_WGMMA
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.u8 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
            "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,"
            "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p;\n}\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
              "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
              "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]),
              "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]),
              "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]),
              "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]),
              "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]),
              "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]),
              "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
            : "l"(da), "l"(db), "r"(accumulate));
#endif
    }
};

template <>
struct WgmmaS8<256> {
    __device__ static void run(int (&d)[128], uint64_t da, uint64_t db, int accumulate) {
#ifdef TRT_WOQ_WGMMA
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.u8 {"
            "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%2"
            "7,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%5"
            "2,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%7"
            "7,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,"
            "%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,"
            "%122,%123,%124,%125,%126,%127"
            "}, %128, %129, p;\n}\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
              "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]),
              "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]),
              "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]),
              "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]),
              "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]),
              "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]),
              "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
              "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
              "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]),
              "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]),
              "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]),
              "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]),
              "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]), "+r"(d[98]),
              "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]), "+r"(d[105]),
              "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
              "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]),
              "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]),
              "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
            : "l"(da), "l"(db), "r"(accumulate));
#endif
    }
};

// The dequantizing epilogue's inputs (per-channel weights: one group).
struct EpiArgs {
    const float* a_scales;   // [M]
    const float* a_offsets;  // [M]
    const int* a_sums;       // [M]
    const void* scales;      // [N] T
    const int* weight_sums;  // [N] or nullptr
    const void* bias;        // [N] T or nullptr
    void* c;                 // [M, N] T
    int m, n;
    Epilogue act;            // fused activation after the bias
};

struct WgArgs {
    const int8_t* a;  // [M, K] codes
    const int8_t* b;  // packed weights as bytes
    EpiArgs epi;
    int k;
};

// Dequantizes channels n, n + 1 of token m from their INT32 sums c0, c1 and stores them with the bias. The product
// is C' = C + 128 * sum a (B holds U = q + 128), so `zero_sum` = 128 times the row's code sum comes off first.
template <typename T, bool ASYM, int EPI>
__device__ __forceinline__ void dequant_pair(const EpiArgs& args, int m, int n, int c0, int c1, float sa, float oa,
                                             int zero_sum) {
    const T* sw = static_cast<const T*>(args.scales);
    const T* bias = static_cast<const T*>(args.bias);
    const int c[2] = {c0, c1};
    float y[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const float s = to_float(sw[n + e]);
        y[e] = sa * (s * (float)(c[e] - zero_sum));
        if (ASYM) y[e] += oa * ((float)args.weight_sums[n + e] * s);
        if (bias) y[e] += to_float(bias[n + e]);
        y[e] = apply_epilogue_kind<EPI>(y[e], args.act);
    }
    T pair[2];
    if constexpr (std::is_same<T, half>::value) {
        *reinterpret_cast<half2*>(pair) = __floats2half2_rn(y[0], y[1]);
    } else {
        *reinterpret_cast<__nv_bfloat162*>(pair) = __floats2bfloat162_rn(y[0], y[1]);
    }
    *reinterpret_cast<uint32_t*>(static_cast<T*>(args.c) + (size_t)m * args.n + n) = *reinterpret_cast<uint32_t*>(pair);
}

// Stores one m64 wgmma accumulator block of NJ x 8 columns: acc[4j + 2h + e] is token `row + 8h` (row: this lane's
// g = lane / 4 within its warp's 16) and column 8j + 2 (lane % 4) + e. A column is channel n0 + column, or with
// LINES (the packed-line operand, gemm_s8_ws) line n0 / 2 + column, whose channels 2 column and 2 column + 1 are in
// acc[...] and acc[4 NJ + ...] (the even and the odd channels' products).
template <int NJ, bool LINES, typename T, bool ASYM, int EPI>
__device__ __forceinline__ void dequant_store(const int* acc, const EpiArgs& args, int row, int n0, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = row + 8 * h;
        if (m >= args.m) continue;
        const float sa = args.a_scales[m], oa = ASYM ? args.a_offsets[m] : 0.f;
        const int zero_sum = 128 * args.a_sums[m];
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
            const int col = 8 * j + 2 * (lane % 4);
            if constexpr (LINES) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int n = n0 + 2 * (col + e);
                    if (n < args.n)  // N is even
                        dequant_pair<T, ASYM, EPI>(args, m, n, acc[4 * j + 2 * h + e], acc[4 * NJ + 4 * j + 2 * h + e],
                                                   sa, oa, zero_sum);
                }
            } else if (n0 + col < args.n) {
                dequant_pair<T, ASYM, EPI>(args, m, n0 + col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], sa, oa,
                                           zero_sum);
            }
        }
    }
}

// The same store (LINES) for the lean warp-specialized variant: a lane's 4 consecutive channels
// n0 + 16 j + 4 (lane % 4) + 0..3 (the even and odd products of its lines col, col + 1), their scales, weight sums
// and bias read once for both tokens, and one 8-byte store per token when N % 4 == 0 (else two 4-byte ones).
template <int NJ, typename T, bool ASYM, int EPI>
__device__ __forceinline__ void dequant_store_quads(const int* acc, const EpiArgs& args, int row, int n0, int lane) {
    const T* sw = static_cast<const T*>(args.scales);
    const T* bias = static_cast<const T*>(args.bias);
    float sa[2], oa[2];
    int zero_sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = min(row + 8 * h, args.m - 1);
        sa[h] = args.a_scales[m];
        oa[h] = ASYM ? args.a_offsets[m] : 0.f;
        zero_sum[h] = 128 * args.a_sums[m];
    }
    const bool wide = args.n % 4 == 0 && reinterpret_cast<uintptr_t>(args.c) % 8 == 0;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
        const int n = n0 + 16 * j + 4 * (lane % 4);
        if (n >= args.n) continue;
        const bool four = n + 4 <= args.n;  // N is even: channels n, n + 1 exist
        float s[4], corr[4], b[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const bool ok = e < 2 || four;
            s[e] = ok ? to_float(sw[n + e]) : 0.f;
            corr[e] = ASYM && ok ? (float)args.weight_sums[n + e] * s[e] : 0.f;
            b[e] = bias && ok ? to_float(bias[n + e]) : 0.f;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = row + 8 * h;
            if (m >= args.m) continue;
            const int c[4] = {acc[4 * j + 2 * h], acc[4 * NJ + 4 * j + 2 * h], acc[4 * j + 2 * h + 1],
                              acc[4 * NJ + 4 * j + 2 * h + 1]};
            float y[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                y[e] = sa[h] * (s[e] * (float)(c[e] - zero_sum[h]));
                if (ASYM) y[e] += oa[h] * corr[e];
                if (bias) y[e] += b[e];
                y[e] = apply_epilogue_kind<EPI>(y[e], args.act);
            }
            uint32_t w[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                if constexpr (std::is_same<T, half>::value) {
                    const half2 v = __floats2half2_rn(y[2 * e], y[2 * e + 1]);
                    w[e] = *reinterpret_cast<const uint32_t*>(&v);
                } else {
                    const __nv_bfloat162 v = __floats2bfloat162_rn(y[2 * e], y[2 * e + 1]);
                    w[e] = *reinterpret_cast<const uint32_t*>(&v);
                }
            }
            T* dst = static_cast<T*>(args.c) + (size_t)m * args.n + n;
            if (wide) {
                *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
            } else {
                *reinterpret_cast<uint32_t*>(dst) = w[0];
                if (four) *reinterpret_cast<uint32_t*>(dst + 2) = w[1];
            }
        }
    }
}

// CTA: BM / 64 warpgroups (BM tokens) x BN channels.
template <int BM, int BN, typename T, bool ASYM>
__global__ void __launch_bounds__(BM * 2) gemm_s8_wgmma(const WgArgs args) {
#ifdef TRT_WOQ_WGMMA
    constexpr int kThreads = BM * 2, kABytes = BM * kWgBK, kBBytes = BN * kWgBK, kStageBytes = kABytes + kBBytes;
    constexpr int kDist = kWgStages - 2;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (gemm::smem_addr(smem_raw) & 1023)) & 1023);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4, wq = warp % 4;
    int m_tile, n_tile;
    tile_coords(m_tile, n_tile);
    const int m0 = m_tile * BM, n0 = n_tile * BN;
    const int k_tiles = args.k / kWgBK;
    const size_t line_bytes = (size_t)args.k * 2;

    auto load_tile = [&](int stage, int kt) {
        unsigned char* sa = smem + stage * kStageBytes;
        unsigned char* sb = sa + kABytes;
#pragma unroll
        for (int it = 0; it < BM * 8 / kThreads; ++it) {
            const int i = tid + it * kThreads, row = i / 8, chunk = i % 8;
            const bool ok = m0 + row < args.epi.m;
            const int8_t* src = args.a + (ok ? (size_t)(m0 + row) * args.k + kt * kWgBK + chunk * 16 : 0);
            cp_async16(sa + row * 128 + (chunk ^ (row & 7)) * 16, src, ok);
        }
#pragma unroll
        for (int it = 0; it < BN * 8 / kThreads; ++it) {
            const int i = tid + it * kThreads, row = i / 8, chunk = i % 8, n = n0 + row;
            const bool ok = n < args.epi.n;
            // chunk c of channel n: 64-k segment kt * 2 + c / 4 of line n / 2, half n % 2, 16 bytes c % 4
            const int8_t* src = args.b + (ok ? (size_t)(n / 2) * line_bytes + (size_t)(kt * 2 + chunk / 4) * 128 +
                                                   (n % 2) * 64 + (chunk % 4) * 16
                                             : 0);
            cp_async16(sb + row * 128 + (chunk ^ (row & 7)) * 16, src, ok);
        }
    };

    int acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0;
#pragma unroll
    for (int s = 0; s < kDist; ++s) {
        if (s < k_tiles) load_tile(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<kDist - 1>();  // tile kt landed
        gemm::fence_proxy_async();  // cp.async (generic proxy) writes -> wgmma (async proxy) reads
        __syncthreads();             // for all threads; every warpgroup's wgmma of tile kt - 2 is done
        if (kt + kDist < k_tiles) load_tile((kt + kDist) % kWgStages, kt + kDist);
        cp_async_commit();
        const unsigned char* sa = smem + (kt % kWgStages) * kStageBytes;
        const uint64_t da = gemm::swizzle128_desc(gemm::smem_addr(sa + wg * 64 * 128));
        const uint64_t db = gemm::swizzle128_desc(gemm::smem_addr(sa + kABytes));
        gemm::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kWgBK / 32; ++ks) {
            WgmmaS8<BN>::run(acc, da + uint64_t(2 * ks), db + uint64_t(2 * ks), kt > 0 || ks > 0);
        }
        gemm::wgmma_commit();
        gemm::wgmma_wait<1>();
    }
    gemm::wgmma_wait<0>();
    cp_async_wait<0>();

    visit_epilogue(args.epi.act, [&](auto kind) {
        dequant_store<BN / 8, false, T, ASYM, decltype(kind)::value>(acc, args.epi, m0 + wg * 64 + wq * 16 + lane / 4,
                                                                     n0, lane);
    });
#else
    __trap();  // built without sm_90a: wgmma_supports() never selects this kernel on such a device
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// SM90a warp-specialized GEMM (per-channel weights). The same product as gemm_s8_wgmma (A = codes s8, B = the
// stored weight bytes U u8, both K-major from shared memory, m64nNk32), fed by TMA:
//   * warp 0 of the producer warpgroup (one lane) loads each stage of 128 k; layout 1 stays as it is in memory,
//     [N / 2 lines][K / 64 segments][2 channels][64 bytes] (docs/layouts.md step 4), read in one of two ways:
//     - 64-byte rows (LINES = false): the codes [BM x 64 k] through a 2D map of [M, K] and the weights through a 4D
//       map of that shape, whose box {64 bytes, both channels, one segment, BN / 2 lines} lands as BN channel rows
//       of 64 k: two 64-k halves per stage, 64-byte swizzle (16-byte chunk c of row r at c ^ (r / 2) % 4).
//     - packed lines (LINES = true): the codes [BM x 128 k] and the weight lines [BN / 2 lines x 128 bytes] of each
//       64-k segment through 2D maps, 128-byte swizzle (chunk c of row r at c ^ r % 8): every TMA row is 128
//       contiguous bytes. A line row is then a K-major row of 128 "k" whose first 64 bytes are the even channel's
//       64 k and whose last 64 the odd channel's, so one wgmma (N = lines) at byte offset 0 / 32 multiplies the even
//       channels and one at 64 / 96 the odd ones; their sums are kept apart (acc[..even], acc[..odd]) and the
//       epilogue interleaves them back.
//     Rows past M or lines past N / 2 are zero-filled by TMA. Stages complete on a "full" mbarrier (transaction
//     bytes) and are released on an "empty" one (one arrival per consumer thread once its wgmma group has read them).
//   * 2 consumer warpgroups (setmaxnreg moves the producer warpgroup's registers to them): WGM = 2 splits the
//     tile's tokens between them (MT m64 blocks each, all BN = BNW channels), WGM = 1 its channels (64 tokens,
//     BNW channels each). One wgmma group per stage stays in flight while the next stage is awaited.
//   * clusters of CM x CN CTAs (WsCfg): the CM CTAs of an N tile (neighbouring M tiles) each load 1 / CM of the
//     weight lines with a multicast TMA into all of them, the CN CTAs of an M tile (neighbouring N tiles) 1 / CN of
//     the code rows, so each byte crosses L2 once per group. A stage is refilled only once the consumers of every
//     CTA it is written into released it (each consumer thread, or LEAN one thread per warpgroup, arrives on the
//     "empty" barriers of the CTAs of its M tile and of its N tile, the last stage included), and the producer
//     waits for its last stages' releases before it exits, so no CTA exits while a peer may still arrive on its
//     barriers.
//   * schedule, in units of one cluster's tiles: the work items are first the dp_tiles whole units (the full
//     waves), then the last partial wave's units split along K in `split` slices of `share` stages each, so that
//     wave fills the SMs. The grid is persistent (one wave: at most one CTA per SM): CTA c takes items c, c + grid,
//     ... in order, and its producer runs on into the next item's stages while the consumers store the last one.
//     Slices 0 .. split - 2 store their INT32 sums to their own slot (coalesced, register order) and count on the
//     tile's flag; the last slice (the highest item of the tile) waits for the count, adds the slots in order
//     (exact: integers) and runs the epilogue. dp_tiles is a multiple of the grid, so a split slice is its CTA's
//     last item and a tail's partners are CTAs of lower index, launched before it: no wait on a CTA that may not
//     be resident yet, whatever the SM count.
//   * programmatic dependent launch (wsp_* tiles): the producer loads the weights of its first item's first S
//     stages, then waits for the quantize kernel (griddepcontrol.wait) before loading their codes; the consumers
//     wait for it before they read its scales, sums and zeroed counters.
constexpr int kWsBK = 128;                     // k per stage
constexpr int kWsThreads = 384;                // producer warpgroup + 2 consumer warpgroups
constexpr int kWsProducerRegs = 40, kWsConsumerRegs = 232;
constexpr int kWsSmem = 227 * 1024;            // the per-block dynamic shared-memory limit of SM90
constexpr int kSmsFallback = 132;              // H100 SXM: the wave when the device cannot be asked

// Stage: codes [BM x 128 k] (kABytes), then weights [BN channels x 128 k] (kBBytes), each as two halves (64-byte
// rows: k 0..63 then 64..127; packed lines: segment 2 kt then 2 kt + 1 of the weights, the codes undivided).
// PP (ping-pong): a stage holds one warpgroup's tile, MT * 64 tokens x BNW channels.
template <int WGM, int MT, int BNW, bool PP = false>
struct WsLayout {
    static constexpr int kBM = (PP ? 1 : WGM) * MT * 64, kBN = PP ? BNW : (2 / WGM) * BNW;
    static constexpr int kABytes = kBM * kWsBK, kBBytes = kBN * kWsBK, kStageBytes = kABytes + kBBytes;
    static constexpr int kFit = (kWsSmem - 1024 - 256) / kStageBytes;
    static constexpr int kStages = kFit < 8 ? kFit : 8;
    static constexpr int kSmem = kStages * kStageBytes + 16 * kStages + 16 + 1024;  // + barriers + alignment slack
    static constexpr int kPart = kBM * kBN;  // INT32 sums per partial slot
    static_assert(kStages >= 2 && kABytes % 2048 == 0 && kBBytes % 2048 == 0, "stage geometry");
};

// A warp-specialized configuration: WGM / MT / BNW (WsLayout), the packed-line operand, a cluster of CM M tiles x
// CN N tiles (the weight lines multicast to the CM CTAs of an N tile, the codes to the CN CTAs of an M tile), and
// LEAN: one release per consumer warpgroup, the tail counters zeroed by the quantize kernel, and with the line
// operand 4-channel stores (dequant_store_quads). PP (ping-pong, LEAN only): the consumer warpgroups take the CTA's
// work items in turn, each item one warpgroup's MT * 64 tokens x BNW channels, so one stores while the other runs
// its mainloop (WGM is then unused).
template <int WGM, int MT, int BNW, bool LINES, int CM = 1, int CN = 1, bool LEAN = false, bool PP = false>
struct WsCfg {
    static constexpr int kWgm = WGM, kMt = MT, kBnw = BNW, kCm = CM, kCn = CN;
    static constexpr bool kLines = LINES, kLean = LEAN, kPp = PP;
    static_assert(LEAN || !PP, "ping-pong releases a stage once, from its warpgroup");
};
template <class C>
using WsLayoutOf = WsLayout<C::kWgm, C::kMt, C::kBnw, C::kPp>;
// Arrivals that release one stage use: the consumer warpgroups that read it (both, or PP the item's one; each of
// their threads unless LEAN) of every CTA with this CTA's M tile or N tile.
template <class C>
constexpr int kWsReleases = (C::kCm + C::kCn - 1) * (C::kPp ? 1 : 2) * (C::kLean ? 1 : 128);

struct WsArgs {
    EpiArgs epi;
    int k;
    int m_units, n_units, units, dp_tiles, split, share;  // schedule (above), in units of one cluster's tiles
    int* partials;         // [slot][kPart] INT32, slot = CLUSTER * (item - dp_tiles) + rank
    unsigned int* flags;   // one per split tile, zeroed before the launch
};

#ifdef TRT_WOQ_WGMMA
// Barrier `id` (2, 3: one per consumer warpgroup; 0 is __syncthreads, 1 gemm::consumers_sync) of one warpgroup.
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
// Shared-memory descriptor of a K-major tile of 64-byte rows with the 64-byte swizzle: start >> 4, leading offset 1
// (unused), stride 512 bytes (8 rows), layout type 2 (64B swizzle); + 2 per k32 step (32 bytes).
__device__ __forceinline__ uint64_t swizzle64_desc(uint32_t smem) {
    return uint64_t((smem & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(512 >> 4) << 32) | (uint64_t(2) << 62);
}
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}
#endif

template <class C, typename T, bool ASYM>
__global__ void __launch_bounds__(kWsThreads, 1)
    gemm_s8_ws(const WsArgs args, const __grid_constant__ CUtensorMap tmap_a,
               const __grid_constant__ CUtensorMap tmap_b) {
#ifdef TRT_WOQ_WGMMA
    constexpr int WGM = C::kWgm, MT = C::kMt, BNW = C::kBnw, CM = C::kCm, CN = C::kCn, CLUSTER = CM * CN;
    constexpr bool LINES = C::kLines, LEAN = C::kLean;
    constexpr bool PP = C::kPp;
    using L = WsLayoutOf<C>;
    static_assert(!LINES || BNW == 256, "the line operand runs m64n128k32 on the even and on the odd channels");
    static_assert(CLUSTER == 1 || LINES, "the multicast loads shares of the line tile");
    static_assert(LEAN || CN == 1, "activation multicast only in the lean variant");
    constexpr int S = L::kStages;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (gemm::smem_addr(smem_raw) + 1023) & ~1023u;
    // PP: order_bar[w] lets warpgroup w start its next mainloop once the other one has issued its last (below).
    const uint32_t full_bar = base + S * L::kStageBytes, empty_bar = full_bar + 8 * S, order_bar = empty_bar + 8 * S;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;

    // Work item `item`: a whole unit, or K slice `slice` of a split unit (the CTAs of a cluster take the same
    // items); this CTA's tile in it is M tile `rm`, N tile `rn` of the unit.
    const int rank = blockIdx.x % CLUSTER, rm = rank % CM, rn = rank / CM, k_tiles = args.k / kWsBK;
    const int first_item = blockIdx.x / CLUSTER, item_step = gridDim.x / CLUSTER;
    const int items = args.dp_tiles + (args.units - args.dp_tiles) * args.split;
    struct Piece {
        int unit, slice, kt_begin, kt_end, m0, n0;
    };
    auto piece_of = [&](int item) {
        Piece q{item, -1, 0, k_tiles, 0, 0};
        if (item >= args.dp_tiles) {
            const int c = item - args.dp_tiles;
            q.unit = args.dp_tiles + c / args.split;
            q.slice = c % args.split;
            q.kt_begin = q.slice * args.share;
            q.kt_end = min(k_tiles, q.kt_begin + args.share);  // non-empty: the host keeps (split - 1) * share < K
        }
        int m_unit, n_unit;
        gemm::band_coords(q.unit, args.m_units, args.n_units, m_unit, n_unit);
        q.m0 = (m_unit * CM + rm) * L::kBM;
        q.n0 = (n_unit * CN + rn) * L::kBN;
        return q;
    };

    if (tid == 0) {
        for (int s = 0; s < S; ++s) {
            gemm::mbar_init(full_bar + 8 * s, 1);               // the producer's expect-tx arrival
            gemm::mbar_init(empty_bar + 8 * s, kWsReleases<C>);
        }
        if constexpr (PP)
            for (int w = 0; w < 2; ++w) gemm::mbar_init(order_bar + 8 * w, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (CLUSTER > 1)
        gemm::cluster_sync();  // the peer's barriers are initialised before any multicast or remote arrival
    else
        __syncthreads();

    // The CTAs of the cluster that read the same codes (same M tile) and the same weights (same N tile): a stage
    // of this CTA is written by both groups, so its releases come from both.
    uint16_t same_m_mask = 0, same_n_mask = 0;
#pragma unroll
    for (int j = 0; j < CN; ++j) same_m_mask |= uint16_t(1u << (rm + CM * j));
#pragma unroll
    for (int i = 0; i < CM; ++i) same_n_mask |= uint16_t(1u << (i + CM * rn));

    // One stage's loads onto barrier `bar`: the weight lines / channel rows of N tile n0, the codes of M tile m0.
    auto load_b = [&](uint32_t sb, uint32_t bar, int kt, int n0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if constexpr (CM > 1) {  // this rank's share of the lines, into the CTAs of its N tile
                constexpr int kLines = L::kBN / 2 / CM;
                gemm::tma_load_2d_multicast(sb + h * L::kBBytes / 2 + rm * kLines * 128, &tmap_b, (kt * 2 + h) * 128,
                                            n0 / 2 + rm * kLines, bar, same_n_mask);
            } else if constexpr (LINES) {
                gemm::tma_load_2d(sb + h * L::kBBytes / 2, &tmap_b, (kt * 2 + h) * 128, n0 / 2, bar);
            } else {
                tma_load_4d(sb + h * L::kBBytes / 2, &tmap_b, 0, 0, kt * 2 + h, n0 / 2, bar);
            }
        }
    };
    auto load_a = [&](uint32_t sa, uint32_t bar, int kt, int m0) {
        if constexpr (CN > 1) {  // this rank's share of the code rows, into the CTAs of its M tile
            constexpr int kRows = L::kBM / CN;
            gemm::tma_load_2d_multicast(sa + rn * kRows * 128, &tmap_a, kt * kWsBK, m0 + rn * kRows, bar,
                                        same_m_mask);
        } else if constexpr (LINES) {
            gemm::tma_load_2d(sa, &tmap_a, kt * kWsBK, m0, bar);
        } else {
#pragma unroll
            for (int h = 0; h < 2; ++h)
                gemm::tma_load_2d(sa + h * L::kABytes / 2, &tmap_a, kt * kWsBK + h * 64, m0, bar);
        }
    };

    if (wg == 0) {
        gemm::regs_dealloc<kWsProducerRegs>();
        if (tid == 0) {
            // The weights do not depend on the quantize kernel: the first item's first stages load them before
            // waiting for its codes (under a programmatic launch, while it still runs).
            int early = 0;
            if (first_item < items) {
                const Piece q = piece_of(first_item);
                for (int kt = q.kt_begin; kt < q.kt_end && early < S; ++kt, ++early) {
                    const uint32_t bar = full_bar + 8 * early;
                    gemm::mbar_arrive_expect_tx(bar, L::kStageBytes);
                    load_b(base + early * L::kStageBytes + L::kABytes, bar, kt, q.n0);
                }
            }
            pdl_wait();
            int g = 0;  // stage uses so far: stage g % S, phase (g / S) & 1
            for (int item = first_item; item < items; item += item_step) {
                const Piece q = piece_of(item);
                for (int kt = q.kt_begin; kt < q.kt_end; ++kt, ++g) {
                    const int s = g % S;
                    if (g >= S) gemm::mbar_wait(empty_bar + 8 * s, (g / S - 1) & 1);
                    const uint32_t bar = full_bar + 8 * s, sa = base + s * L::kStageBytes;
                    if (g >= early) {
                        gemm::mbar_arrive_expect_tx(bar, L::kStageBytes);
                        load_b(sa + L::kABytes, bar, kt, q.n0);
                    }
                    load_a(sa, bar, kt, q.m0);
                }
            }
            // Cluster: the last stages' releases include the peer's remote arrivals; stay until they landed.
            if constexpr (CLUSTER > 1)
                for (int j = max(0, g - S); j < g; ++j) gemm::mbar_wait(empty_bar + 8 * (j % S), (j / S) & 1);
        }
        return;
    }

    gemm::regs_alloc<kWsConsumerRegs>();
    pdl_wait();  // the epilogue reads the quantize kernel's scales and sums, the tail split its zeroed counters
    const int ctid = tid - 128, cw = ctid / 128, wq = warp % 4;
    // This warpgroup's token block / channel block of the tile (PP: the item is its own).
    const int wm = !PP && WGM == 2 ? cw : 0, wn = !PP && WGM != 2 ? cw : 0;
    // The threads that share an item (its partial sums, its split counter): both warpgroups, or PP this one.
    constexpr int kItemThreads = PP ? 128 : 256;
    const int itid = PP ? ctid % 128 : ctid;
    auto item_sync = [&] {
        if constexpr (PP)
            warpgroup_sync(2 + cw);
        else
            gemm::consumers_sync();
    };
    // A stage use this warpgroup has read is released in this CTA and in every CTA whose producer writes into it
    // (same M tile or same N tile): by every consumer thread, or (LEAN) by one thread per warpgroup once its
    // wgmma_wait returned (the warpgroup's wgmma groups up to that one are complete, so is their smem read).
    auto release = [&](int g) {
        const uint32_t bar = empty_bar + 8 * (g % S);
        if (LEAN && ctid % 128 != 0) return;
        gemm::mbar_arrive(bar);
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r)
            if (r != rank && ((same_m_mask | same_n_mask) >> r & 1)) gemm::mbar_arrive_cluster(bar, r);
    };
    // LINES: acc[mt][0 .. BNW / 4) the even channels' sums, [BNW / 4 .. BNW / 2) the odd ones'.
    int acc[MT][BNW / 2];
    int g = 0;  // stage uses so far, as the producer counts them
    int turn = 0;  // PP: this CTA's items so far; item `turn` is warpgroup turn % 2's
    int order_waits = 0;
    for (int item = first_item; item < items; item += item_step, ++turn) {
        const Piece q = piece_of(item);
        if constexpr (PP) {
            if (turn % 2 != cw) {  // the other warpgroup's: skip its stage uses
                g += q.kt_end - q.kt_begin;
                continue;
            }
            // Its stage uses follow the other warpgroup's previous item in the ring: wait until that one waited
            // for all of its own, so no "full" barrier is awaited more than one phase ahead.
            if (turn > 0) gemm::mbar_wait(order_bar + 8 * cw, order_waits++ & 1);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < BNW / 2; ++j) acc[mt][j] = 0;
        for (int i = 0; i < q.kt_end - q.kt_begin; ++i, ++g) {
            const int s = g % S;
            gemm::mbar_wait(full_bar + 8 * s, (g / S) & 1);
            const uint32_t sa = base + s * L::kStageBytes, sb = sa + L::kABytes;
            gemm::wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kWsBK / 32; ++ks)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int rows = (wm * MT + mt) * 64;  // this block's first token in the tile
                    const int h = ks / 2, k32 = 2 * (ks % 2);  // 64-k half (segment), 32-byte step in it
                    if constexpr (LINES) {
                        using Half = int[BNW / 4];
                        const uint64_t da = gemm::swizzle128_desc(sa + rows * 128) + uint64_t(2 * ks);
                        const uint64_t db =
                            gemm::swizzle128_desc(sb + h * (L::kBBytes / 2) + wn * (BNW / 2) * 128) + uint64_t(k32);
                        WgmmaS8<BNW / 2>::run(*reinterpret_cast<Half*>(&acc[mt][0]), da, db, 1);
                        WgmmaS8<BNW / 2>::run(*reinterpret_cast<Half*>(&acc[mt][BNW / 4]), da, db + 4, 1);  // +64 B
                    } else {
                        const uint64_t da = swizzle64_desc(sa + h * (L::kABytes / 2) + rows * 64) + uint64_t(k32);
                        const uint64_t db = swizzle64_desc(sb + h * (L::kBBytes / 2) + wn * BNW * 64) + uint64_t(k32);
                        WgmmaS8<BNW>::run(acc[mt], da, db, 1);
                    }
                }
            gemm::wgmma_commit();
            gemm::wgmma_wait<1>();  // the previous stage's group is done: release its buffers
            if (i > 0) release(g - 1);
        }
        if (PP && ctid % 128 == 0) gemm::mbar_arrive(order_bar + 8 * (1 - cw));  // the other's mainloop may start
        gemm::wgmma_wait<0>();
        release(g - 1);

        if (q.slice >= 0) {
            const int c = item - args.dp_tiles;
            unsigned int* flag = args.flags + (q.unit - args.dp_tiles) * CLUSTER + rank;
            if (q.slice < args.split - 1) {  // store this slice's sums, then count it
                int* dst = args.partials + (size_t)(c * CLUSTER + rank) * L::kPart + itid;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < BNW / 2; ++j) __stcg(dst + (mt * BNW / 2 + j) * kItemThreads, acc[mt][j]);
                __threadfence();
                item_sync();
                if (itid == 0) gemm::flag_release_add(flag);
                continue;
            }
            if (itid == 0)
                while (gemm::flag_acquire_load(flag) < unsigned(args.split - 1)) __nanosleep(128);
            item_sync();
            for (int z = c - q.slice; z < c; ++z) {
                const int* src = args.partials + (size_t)(z * CLUSTER + rank) * L::kPart + itid;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < BNW / 2; ++j) acc[mt][j] += __ldcg(src + (mt * BNW / 2 + j) * kItemThreads);
            }
        }
        visit_epilogue(args.epi.act, [&](auto kind) {
            constexpr int EPI = decltype(kind)::value;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int row = q.m0 + (wm * MT + mt) * 64 + wq * 16 + lane / 4, n0 = q.n0 + wn * BNW;
                if constexpr (LEAN && LINES)
                    dequant_store_quads<BNW / 16, T, ASYM, EPI>(acc[mt], args.epi, row, n0, lane);
                else
                    dequant_store<BNW / (LINES ? 16 : 8), LINES, T, ASYM, EPI>(acc[mt], args.epi, row, n0, lane);
            }
        });
    }
#else
    __trap();  // built without sm_90a: gemm_supports() never selects this kernel on such a device
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Workspace: codes [M, K] int8, then scales and offsets [M, groups] fp32 and code sums [M, groups] int32, each at a
// 256-byte boundary.
size_t align256(size_t b) { return (b + 255) / 256 * 256; }
int groups_of(const trt_woq_linear_params* p) { return p->group_size == -1 ? 1 : int(p->k / p->group_size); }
size_t codes_bytes(const trt_woq_linear_params* p) { return align256((size_t)p->m * p->k); }
size_t params_bytes(const trt_woq_linear_params* p) { return align256((size_t)p->m * groups_of(p) * sizeof(float)); }

enum class Kind { kMma, kWgmma, kWs, kWsLines };
struct Tile {
    const char* name;
    int bm, bn;
    Kind kind;         // all but kMma: SM90a, per-channel weights, K % 128 == 0
    int cm = 1, cn = 1;  // kWsLines: a cluster of cm neighbouring M tiles (sharing weights) x cn N tiles (codes)
    bool lean = false;   // warp-specialized: WsCfg's LEAN
    bool pdl = false;    // lean: the GEMM is a programmatic dependent launch after the quantize kernel
    bool pp = false;     // lean: ping-pong consumers (WsCfg's PP), bm x bn per warpgroup
    constexpr int cluster() const { return cm * cn; }
};
constexpr Tile kTiles[] = {{"w8a8_mma_128x128", 128, 128, Kind::kMma},
                           {"w8a8_mma_64x128", 64, 128, Kind::kMma},
                           {"w8a8_wgmma_128x128", 128, 128, Kind::kWgmma},
                           {"w8a8_wgmma_64x128", 64, 128, Kind::kWgmma},
                           {"w8a8_wgmma_128x256", 128, 256, Kind::kWgmma},
                           {"w8a8_ws_128x256", 128, 256, Kind::kWs},
                           {"w8a8_ws_256x128", 256, 128, Kind::kWs},
                           {"w8a8_ws_128x128", 128, 128, Kind::kWs},
                           {"w8a8_ws_64x256", 64, 256, Kind::kWs},
                           {"w8a8_wsl_128x256", 128, 256, Kind::kWsLines},
                           {"w8a8_wsl_64x512", 64, 512, Kind::kWsLines},
                           {"w8a8_wsl_128x256_c2", 128, 256, Kind::kWsLines, 2},
                           {"w8a8_wsc_128x256_1x1", 128, 256, Kind::kWsLines, 1, 1, true},
                           {"w8a8_wsc_128x256_2x1", 128, 256, Kind::kWsLines, 2, 1, true},
                           {"w8a8_wsc_128x256_1x2", 128, 256, Kind::kWsLines, 1, 2, true},
                           {"w8a8_wsc_128x256_2x2", 128, 256, Kind::kWsLines, 2, 2, true},
                           {"w8a8_wsp_128x256", 128, 256, Kind::kWsLines, 1, 1, true, true},
                           {"w8a8_wsp_128x128", 128, 128, Kind::kWs, 1, 1, true, true},
                           {"w8a8_wspp_64x256", 64, 256, Kind::kWsLines, 1, 1, true, true, true},
                           {"w8a8_wspp_64x256_2x1", 64, 256, Kind::kWsLines, 2, 1, true, true, true},
                           {"w8a8_wsppr_64x128", 64, 128, Kind::kWs, 1, 1, true, true, true},
                           {"w8a8_wsppr_64x256", 64, 256, Kind::kWs, 1, 1, true, true, true}};
constexpr int kTileCount = sizeof(kTiles) / sizeof(kTiles[0]);
// A tile's index in kTiles by its name (-1: none), so the dispatch names its picks and additions cannot shift them.
constexpr bool same_name(const char* a, const char* b) { return *a == *b && (*a == '\0' || same_name(a + 1, b + 1)); }
constexpr int tile_id(const char* name, int i = 0) {
    return i == kTileCount ? -1 : same_name(kTiles[i].name, name) ? i : tile_id(name, i + 1);
}
bool is_ws(const Tile& t) { return t.kind == Kind::kWs || t.kind == Kind::kWsLines; }
constexpr int kBN = 128;  // mma.sync tiles

// Calls f(WsCfg<...>{}) with the configuration of warp-specialized tile t.
template <typename F>
auto visit_ws(const Tile& t, F&& f) {
    if (t.pp) {
        if (t.kind == Kind::kWs && t.bn == 256) return f(WsCfg<2, 1, 256, false, 1, 1, true, true>{});
        if (t.kind == Kind::kWs) return f(WsCfg<2, 1, 128, false, 1, 1, true, true>{});
        if (t.cm == 2) return f(WsCfg<2, 1, 256, true, 2, 1, true, true>{});
        return f(WsCfg<2, 1, 256, true, 1, 1, true, true>{});
    }
    if (t.kind == Kind::kWsLines) {
        if (t.lean) {
            if (t.cm == 2 && t.cn == 2) return f(WsCfg<2, 1, 256, true, 2, 2, true>{});
            if (t.cm == 2) return f(WsCfg<2, 1, 256, true, 2, 1, true>{});
            if (t.cn == 2) return f(WsCfg<2, 1, 256, true, 1, 2, true>{});
            return f(WsCfg<2, 1, 256, true, 1, 1, true>{});
        }
        if (t.cm == 2) return f(WsCfg<2, 1, 256, true, 2>{});
        if (t.bm == 64) return f(WsCfg<1, 1, 256, true>{});
        return f(WsCfg<2, 1, 256, true>{});
    }
    if (t.lean) return f(WsCfg<2, 1, 128, false, 1, 1, true>{});
    if (t.bm == 64) return f(WsCfg<1, 1, 128, false>{});
    if (t.bm == 256) return f(WsCfg<2, 2, 128, false>{});
    if (t.bn == 256) return f(WsCfg<2, 1, 256, false>{});
    return f(WsCfg<2, 1, 128, false>{});
}

// The current device's SM count (kSmsFallback when it cannot be asked).
int device_sms() {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
                                                   cudaSuccess || sms <= 0) {
        cudaGetLastError();
        return kSmsFallback;
    }
    return sms;
}

// The persistent grid of warp-specialized tile t on the current device, in CTAs: one per SM, or for clusters as many
// whole clusters as can be resident at once (cudaOccupancyMaxActiveClusters: a GPC holds whole clusters only).
// Cached per device and tile; the workspace size and the launch read the same value.
int ws_wave(int tile) {
    constexpr int kDevices = 64;
    static std::atomic<int> cache[kDevices][kTileCount];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        dev = -1;
    }
    if (dev >= 0 && dev < kDevices) {
        const int hit = cache[dev][tile].load(std::memory_order_relaxed);
        if (hit > 0) return hit;
    }
    const Tile& t = kTiles[tile];
    const int sms = device_sms(), cluster = t.cluster();
    int clusters = sms / cluster;
    if (cluster > 1) {
        const int resident = visit_ws(t, [&](auto c) {
            using C = decltype(c);
            using L = WsLayoutOf<C>;
            auto kernel = gemm_s8_ws<C, half, false>;
            if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem) != cudaSuccess)
                return 0;
            cudaLaunchAttribute attr;
            const cudaLaunchConfig_t config = cluster_config(dim3(unsigned(clusters * cluster)), dim3(kWsThreads),
                                                             L::kSmem, unsigned(cluster), nullptr, &attr);
            int n = 0;
            return cudaOccupancyMaxActiveClusters(&n, kernel, &config) == cudaSuccess ? n : 0;
        });
        cudaGetLastError();
        if (resident > 0) clusters = std::min(clusters, resident);
    }
    const int wave = std::max(1, clusters) * cluster;
    if (dev >= 0 && dev < kDevices) cache[dev][tile].store(wave, std::memory_order_relaxed);
    return wave;
}

// The warp-specialized schedule (gemm_s8_ws), in units of one cluster's tiles: whole units for the full waves; the
// last partial wave's units split along K into as many slices as the wave has room for, at most kMaxSplit (the
// last slice adds the others' sums serially).
constexpr int kMaxSplit = 4;
struct WsPlan {
    int m_units, n_units, dp_tiles, split, share;
    int64_t units;
};
WsPlan ws_plan(const trt_woq_linear_params* p, int tile) {
    const Tile& t = kTiles[tile];
    WsPlan w{};
    const int64_t m_tiles = (p->m + t.bm - 1) / t.bm, m_units = (m_tiles + t.cm - 1) / t.cm;
    const int64_t n_tiles = (p->n + t.bn - 1) / t.bn, n_units = (n_tiles + t.cn - 1) / t.cn;
    w.units = m_units * n_units;
    if (w.units > (int64_t(1) << 29)) return w;  // refused by gemm_supports
    w.m_units = int(m_units);
    w.n_units = int(n_units);
    const int wave = ws_wave(tile) / t.cluster(), k_tiles = int(p->k / kWsBK), rest = int(w.units % wave);
    w.dp_tiles = int(w.units);
    w.split = 1;
    w.share = k_tiles;
    const int split = rest == 0 ? 1 : std::min(std::min(wave / rest, kMaxSplit), k_tiles);
    if (split >= 2) {
        const int share = (k_tiles + split - 1) / split;
        const int slices = (k_tiles + share - 1) / share;  // no empty slice
        if (slices >= 2) {
            w.dp_tiles = int(w.units) - rest;
            w.split = slices;
            w.share = share;
        }
    }
    return w;
}
// Units computed in K slices, times the slices (the partial slots and flags are per CTA of such a unit).
int64_t ws_slices(const WsPlan& w) { return w.split < 2 ? 0 : (w.units - w.dp_tiles) * w.split; }
size_t quantize_bytes(const trt_woq_linear_params* p) { return codes_bytes(p) + 3 * params_bytes(p); }
size_t ws_slots_bytes(const WsPlan& w, const Tile& t) {
    return align256(size_t(ws_slices(w)) * t.cluster() * t.bm * t.bn * sizeof(int));
}
// Workspace after the quantize kernel's outputs: the partial slots, then the split counters.
unsigned* ws_flags(const trt_woq_linear_params* p, int tile, const WsPlan& w) {
    return reinterpret_cast<unsigned*>(static_cast<uint8_t*>(p->workspace) + quantize_bytes(p) +
                                       ws_slots_bytes(w, kTiles[tile]));
}
size_t ws_extra_bytes(const trt_woq_linear_params* p, int tile) {
    const WsPlan w = ws_plan(p, tile);
    if (w.split < 2) return 0;
    return ws_slots_bytes(w, kTiles[tile]) + size_t(w.units - w.dp_tiles) * kTiles[tile].cluster() * sizeof(unsigned);
}

// cuTensorMapEncodeTiled for a byte tensor with zero fill (the driver's, reached through the runtime: the library
// does not link libcuda); false when it is not there or refuses.
bool encode_bytes(CUtensorMap* map, int rank, const void* base, const cuuint64_t* dims, const cuuint64_t* strides,
                  const cuuint32_t* box, CUtensorMapSwizzle swizzle) {
    static void* const fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                                               &found);
        return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? f : nullptr;
    }();
    if (fn == nullptr) return false;
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(
               map, CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, const_cast<void*>(base), dims, strides, box, unit,
               CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Raises `kernel`'s dynamic shared-memory limit and launches it in clusters of `cluster` CTAs along x; with
// `programmatic`, as a programmatic dependent launch after the quantize kernel (launch_ex).
template <typename... Params, typename... Args>
trt_woq_status launch_clustered(void (*kernel)(Params...), int cluster, bool programmatic, dim3 grid, int threads,
                                int smem, cudaStream_t stream, const Args&... args) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return record_cuda_error(err);
    return launch_ex(kernel, grid, dim3(threads), smem, unsigned(cluster), programmatic, stream, args...);
}

template <class C, typename T, bool ASYM>
trt_woq_status launch_ws(const trt_woq_linear_params* p, int tile, const EpiArgs& epi, cudaStream_t stream) {
    using L = WsLayoutOf<C>;
    constexpr int CLUSTER = C::kCm * C::kCn;
    static_assert(L::kBM <= 256 && L::kBN / 2 <= 256, "TMA boxes span at most 256 rows");
    const WsPlan w = ws_plan(p, tile);
    const uint64_t k = uint64_t(p->k), m = uint64_t(p->m), lines = uint64_t(p->n / 2);
    CUtensorMap tmap_a, tmap_b;
    bool ok;
    if (C::kLines) {
        // Codes [M, K], box 128 k x BM tokens; weight lines [N / 2, 2K bytes], box one 128-byte segment x the
        // tile's BN / 2 lines (in a cluster, a rank's share of each).
        const cuuint64_t a_dims[2] = {k, m}, a_strides[1] = {k}, b_dims[2] = {2 * k, lines}, b_strides[1] = {2 * k};
        const cuuint32_t a_box[2] = {kWsBK, L::kBM / C::kCn}, b_box[2] = {128, L::kBN / 2 / C::kCm};
        ok = encode_bytes(&tmap_a, 2, p->workspace, a_dims, a_strides, a_box, CU_TENSOR_MAP_SWIZZLE_128B) &&
             encode_bytes(&tmap_b, 2, p->packed_weight, b_dims, b_strides, b_box, CU_TENSOR_MAP_SWIZZLE_128B);
    } else {
        // Codes: box 64 k x BM tokens. Weights as [N / 2 lines][K / 64][2 channels][64 bytes], box {64, 2, 1, BN / 2}:
        // BN channel rows of 64 k.
        const cuuint64_t a_dims[2] = {k, m}, a_strides[1] = {k};
        const cuuint64_t b_dims[4] = {64, 2, k / 64, lines}, b_strides[3] = {64, 128, 2 * k};
        const cuuint32_t a_box[2] = {64, L::kBM}, b_box[4] = {64, 2, 1, L::kBN / 2};
        ok = encode_bytes(&tmap_a, 2, p->workspace, a_dims, a_strides, a_box, CU_TENSOR_MAP_SWIZZLE_64B) &&
             encode_bytes(&tmap_b, 4, p->packed_weight, b_dims, b_strides, b_box, CU_TENSOR_MAP_SWIZZLE_64B);
    }
    if (!ok) return record_cuda_error(cudaErrorInvalidValue);
    WsArgs args{epi, int(p->k), w.m_units, w.n_units, int(w.units), w.dp_tiles, w.split, w.share, nullptr, nullptr};
    if (w.split > 1) {
        args.partials = reinterpret_cast<int*>(static_cast<uint8_t*>(p->workspace) + quantize_bytes(p));
        args.flags = ws_flags(p, tile, w);
        if (!C::kLean) {  // else zeroed by the quantize kernel
            const size_t flags = size_t(w.units - w.dp_tiles) * CLUSTER * sizeof(unsigned);
            const cudaError_t err = cudaMemsetAsync(args.flags, 0, flags, stream);
            if (err != cudaSuccess) return record_cuda_error(err);
        }
    }
    const int64_t ctas = std::min<int64_t>(w.dp_tiles + ws_slices(w), ws_wave(tile) / CLUSTER) * CLUSTER;  // persistent
    return launch_clustered(gemm_s8_ws<C, T, ASYM>, CLUSTER, kTiles[tile].pdl, dim3(unsigned(ctas)), kWsThreads,
                            L::kSmem, stream, args, tmap_a, tmap_b);
}

template <typename T, bool ASYM>
trt_woq_status launch_typed(const trt_woq_linear_params* p, int tile, cudaStream_t stream) {
    const int m = int(p->m), k = int(p->k), n = int(p->n), groups = groups_of(p);
    const int block = k / groups;
    int8_t* codes = static_cast<int8_t*>(p->workspace);
    float* a_scales = reinterpret_cast<float*>(static_cast<uint8_t*>(p->workspace) + codes_bytes(p));
    float* a_offsets = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(a_scales) + params_bytes(p));
    int* a_sums = reinterpret_cast<int*>(reinterpret_cast<uint8_t*>(a_offsets) + params_bytes(p));
    const T* x = static_cast<const T*>(p->activation);
    const Tile& t = kTiles[tile];
    unsigned* zero = nullptr;  // the lean tiles' split counters
    int zero_count = 0;
    if (t.lean) {
        const WsPlan w = ws_plan(p, tile);
        if (w.split > 1) {
            zero = ws_flags(p, tile, w);
            zero_count = int((w.units - w.dp_tiles) * t.cluster());
        }
    }
    if (block <= 256 && (block & (block - 1)) == 0) {  // the lanes of a block form an aligned power-of-two group
        quantize_blocks<T, ASYM><<<m, kQThreads, 0, stream>>>(x, codes, a_scales, a_offsets, a_sums, k, block, zero,
                                                               zero_count);
    } else {
        const int held = (k / 16 + kQThreads - 1) / kQThreads;  // chunks per thread
        auto rows = held <= 1 ? quantize_rows<T, ASYM, 1> : held <= 2 ? quantize_rows<T, ASYM, 2>
                  : held <= 4 ? quantize_rows<T, ASYM, 4> : quantize_rows<T, ASYM, 0>;
        rows<<<m, kQThreads, 0, stream>>>(x, codes, a_scales, a_offsets, a_sums, k, zero, zero_count);
    }
    trt_woq_status s = check_launch();
    if (s != TRT_WOQ_OK) return s;
    const EpiArgs epi{a_scales, a_offsets, a_sums, p->scales, static_cast<const int*>(p->weight_sums), p->bias,
                      p->output, m, n, epilogue_of(*p)};
    if (is_ws(t))
        return visit_ws(t, [&](auto c) { return launch_ws<decltype(c), T, ASYM>(p, tile, epi, stream); });
    const dim3 grid((m + t.bm - 1) / t.bm, (n + t.bn - 1) / t.bn);
    if (t.kind == Kind::kWgmma) {
        const WgArgs args{codes, static_cast<const int8_t*>(p->packed_weight), epi, k};
        const int smem = kWgStages * (t.bm + t.bn) * kWgBK + 1024;  // + slack for the 1024-byte alignment
        if (t.bn == 256)
            return launch_clustered(gemm_s8_wgmma<128, 256, T, ASYM>, 1, false, grid, 256, smem, stream, args);
        if (t.bm == 64)
            return launch_clustered(gemm_s8_wgmma<64, 128, T, ASYM>, 1, false, grid, 128, smem, stream, args);
        return launch_clustered(gemm_s8_wgmma<128, 128, T, ASYM>, 1, false, grid, 256, smem, stream, args);
    }
    const GemmArgs args{codes, a_scales, a_offsets, static_cast<const int8_t*>(p->packed_weight), p->scales,
                        static_cast<const int*>(p->weight_sums), p->bias, p->output, m, n, k, groups, block / 32,
                        epilogue_of(*p)};
    if (t.bm == 128)
        return launch_clustered(gemm_s8<128, kBN, 2, 4, T, ASYM>, 1, false, grid, 256,
                                kStages * (128 * kBK + kBN / 2 * 128), stream, args);
    return launch_clustered(gemm_s8<64, kBN, 2, 4, T, ASYM>, 1, false, grid, 256,
                            kStages * (64 * kBK + kBN / 2 * 128), stream, args);
}

// ---------------------------------------------------------------------------------------------------------------
// Candidates.
constexpr Serves kW8A8Linear = {bit(TRT_WOQ_WEIGHT_INT8), bit(TRT_WOQ_ACT_MODE_W8A8_DYNAMIC), bit(TRT_WOQ_OP_LINEAR),
                                kIntWeightOnlyLinear.epilogues};

// Symmetric weights only: the epilogue has no o_w term (the op contract refuses zero points with W8A8).
template <int TILE>
trt_woq_status gemm_supports(const trt_woq_linear_params* p, int32_t sm) {
    const Tile& t = kTiles[TILE];
    if (p->zeros != nullptr) return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
    if (sm < 80) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    // INT32 sums of one group: |a * w| <= 128 * 128 (mma.sync, signed codes) or 128 * 255 (wgmma: unsigned U), so
    // a group may span at most 131072 or 65536 k.
    const int64_t group_k = p->group_size == -1 ? p->k : p->group_size;
    if (p->m <= kSmallM || p->m > INT32_MAX / 2 || group_k > (t.kind == Kind::kMma ? 131072 : 65536) ||
        p->n > INT32_MAX / 2) {
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
    if (t.kind != Kind::kMma) {
        // sm_90a code (the library builds 90a-real; it does not run on later major versions either)
        if (sm != 90) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
        if (p->group_size != -1 || p->k % kWgBK != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
    if (is_ws(t) && ws_plan(p, TILE).units > (int64_t(1) << 29)) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    return TRT_WOQ_OK;
}

template <int TILE>
size_t gemm_workspace(const trt_woq_linear_params* p, int32_t) {
    if (p->m == 0) return 0;
    return quantize_bytes(p) + (is_ws(kTiles[TILE]) ? ws_extra_bytes(p, TILE) : 0);
}

template <int TILE>
trt_woq_status gemm_launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    // TMA reads the codes at the workspace's start: 16-byte alignment.
    if (is_ws(kTiles[TILE]) && reinterpret_cast<uintptr_t>(p->workspace) % 16 != 0)
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    const bool bf16 = p->act_type == TRT_WOQ_ACT_BF16, asym = p->act_asymmetric != 0;
    if (bf16) return asym ? launch_typed<__nv_bfloat16, true>(p, TILE, stream)
                          : launch_typed<__nv_bfloat16, false>(p, TILE, stream);
    return asym ? launch_typed<half, true>(p, TILE, stream) : launch_typed<half, false>(p, TILE, stream);
}

// SM90 with per-channel weights, by T, the grid of 128 x 256 tiles (docs/kernels_w8a8.md, "Dispatch"):
//   * T <= 64 and M > 128, unless K <= 4096 and T <= 32: ping-pong 64 x 256 items in clusters of 2 sharing the
//     weight lines (wspp_64x256_2x1: 5-15 % faster than the 128-token tiles at 4096 x 4096, M = 333 / 512, and
//     14336 x 4096, M = 256; as fast up to M = 512 there);
//   * T < 64 and M <= 128: ping-pong 64 x 128 items on 64-byte rows where K <= 4096 (4096 x 4096, M = 128), else
//     128 x 128 tiles on 64-byte rows; T < 64 and K <= 4096 (M = 129 .. 256 there): 128 x 128 tiles;
//   * else the lean kernel on packed lines, 128 x 256 without a cluster, up to two waves of them as a programmatic
//     dependent launch after the quantize kernel (wsp_*: 1-8 us less at N = 4096, M <= 2048), past that the plain
//     launch (the saving was below the run-to-run spread there). The ping-pong tiles load a stage of weights per 64
//     tokens and measured 8-55 % slower than 128 x 256 from M = 768 on at N = 4096.
// Elsewhere mma.sync, the 128 x 128 tile when its grid fills the GPU's SMs at least once, the 64 x 128 tile
// otherwise. The other tiles stay usable by id.
int64_t ctas(const trt_woq_linear_params* p, const Tile& t) {
    return (p->m + t.bm - 1) / t.bm * ((p->n + t.bn - 1) / t.bn);
}
int ws_tile_for(const trt_woq_linear_params* p) {
    constexpr int kWsc128x256 = tile_id("w8a8_wsc_128x256_1x1"), kWsp128x256 = tile_id("w8a8_wsp_128x256"),
                  kWsp128x128 = tile_id("w8a8_wsp_128x128"), kWspp64x256c2 = tile_id("w8a8_wspp_64x256_2x1"),
                  kWsppr64x128 = tile_id("w8a8_wsppr_64x128");
    static_assert(kWsc128x256 >= 0 && kWsp128x256 >= 0 && kWsp128x128 >= 0 && kWspp64x256c2 >= 0 &&
                      kWsppr64x128 >= 0,
                  "the dispatch's tiles are in kTiles");
    const int64_t tiles = ctas(p, kTiles[kWsp128x256]);
    if (tiles <= 64 && p->m > 128 && !(p->k <= 4096 && tiles <= 32)) return kWspp64x256c2;
    if (tiles < 64 && p->m <= 128 && p->k <= 4096) return kWsppr64x128;
    if (tiles < 64 && (p->m <= 128 || p->k <= 4096)) return kWsp128x128;
    return tiles <= 2 * device_sms() ? kWsp128x256 : kWsc128x256;
}
template <int TILE>
int32_t gemm_score(const trt_woq_linear_params* p, int32_t) {
    const Tile& t = kTiles[TILE];
    if (is_ws(t)) return TILE == ws_tile_for(p) ? 90 : 80;
    if (t.kind == Kind::kWgmma) return 60;
    if (t.bm == 64) return 51;
    return ctas(p, t) >= device_sms() ? 52 : 50;
}

// M <= 16: the INT8 weight-only kernels on the same packed weights and scales. At these sizes the GEMV streams the
// weights at memory speed and quantizing X would only add a launch; the activations are then not rounded to INT8.
trt_woq_linear_params as_weight_only(const trt_woq_linear_params* p) {
    trt_woq_linear_params q = *p;
    q.act_mode = TRT_WOQ_ACT_MODE_WEIGHT_ONLY;
    q.act_asymmetric = 0;
    q.weight_sums = nullptr;
    return q;
}

trt_woq_status small_supports(const trt_woq_linear_params* p, int32_t sm) {
    if (p->m > kSmallM || p->zeros != nullptr) return p->zeros ? TRT_WOQ_ERR_UNSUPPORTED_OPTION
                                                               : TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    const trt_woq_linear_params q = as_weight_only(p);
    return trt_woq_linear_dispatch(&q, sm) >= 0 ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_ARCH;
}

size_t small_workspace(const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_linear_params q = as_weight_only(p);
    return trt_woq_linear_workspace_size(TRT_WOQ_CANDIDATE_AUTO, &q, sm);
}

trt_woq_status small_launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    const trt_woq_linear_params q = as_weight_only(p);
    return trt_woq_linear_run(TRT_WOQ_CANDIDATE_AUTO, &q, stream);
}

int32_t small_score(const trt_woq_linear_params*, int32_t) { return 100; }

}  // namespace
}  // namespace w8a8

#define TRT_WOQ_W8A8_GEMM_CANDIDATE(tile)                                                                  \
    {w8a8::kTiles[tile].name, w8a8::kW8A8Linear, w8a8::gemm_supports<tile>, w8a8::gemm_workspace<tile>,      \
     w8a8::gemm_launch<tile>, w8a8::gemm_score<tile>}
const Candidate kW8A8Candidates[] = {
    TRT_WOQ_W8A8_GEMM_CANDIDATE(0),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(1),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(2),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(3),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(4),
    {"w8a8_small_m_weight_only", w8a8::kW8A8Linear, w8a8::small_supports, w8a8::small_workspace, w8a8::small_launch,
     w8a8::small_score},
    TRT_WOQ_W8A8_GEMM_CANDIDATE(5),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(6),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(7),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(8),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(9),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(10),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(11),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(12),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(13),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(14),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(15),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(16),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(17),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(18),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(19),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(20),
    TRT_WOQ_W8A8_GEMM_CANDIDATE(21),
};
const int kW8A8CandidateCount = sizeof(kW8A8Candidates) / sizeof(kW8A8Candidates[0]);
static_assert(sizeof(kW8A8Candidates) / sizeof(kW8A8Candidates[0]) == w8a8::kTileCount + 1,
              "one candidate per tile of kTiles, plus the small-M GEMV");

}  // namespace trt_woq
