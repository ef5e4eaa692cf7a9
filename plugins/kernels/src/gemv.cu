/*
 * Small-batch weight-only GEMV family (M = 1 .. 16) for layout v1, on mma.sync m16n8k16 with FP32 accumulation.
 *
 * Why tensor cores for a GEMV: at M = 16 every weight is used 16 times; FP32 FFMA at 16 FMA per weight would take
 * longer than streaming INT4 weights from HBM. One m16n8k16 does it at 1/16 of an instruction per weight-row, and the
 * layout already hands each lane its B-fragment words. Rows M .. 15 of the A operand are zero.
 *
 * Work split:
 *   CTA   = NT tiles of 8 output channels (8 * NT channels), all of K; its warps split K (chunk c goes to warp c % W)
 *           and add their partial sums through shared memory at the end.
 *   warp  = for one K chunk (128 k for INT4, 64 k for INT8) and one tile: lane t = 4 g + q loads, with ONE coalesced
 *           16-byte load, block q (32 INT4 / 16 INT8 consecutive packed positions) of channel g. The 32 lanes read
 *           whole 128-byte lines (INT4: 2 packed rows x 2 lines; INT8: 4 packed rows x 1 line).
 *   k order: mma only needs A and B to agree on which k a lane's registers hold. Lane q feeds the mma's k-slot
 *           2q, 2q+1, 2q+8, 2q+9 from its own block: word w of the block is (after step 2 of the layout) exactly the
 *           elements 2w, 2w+1, 2w+8, 2w+9 (+16, 17, 24, 25 for INT4's second half) of the block, so the activation
 *           row loaded by the same lane (64 or 32 contiguous bytes of its own block) supplies A without shuffles:
 *           pair p of the block is component p % 4 of 16-byte vector p / 4.
 *   scales: group-wise scales multiply the converted weights (a block never straddles a group: blocks are 16 or 32 k,
 *           groups 32 .. 256 k, all aligned); per-channel scales multiply the FP32 sum once in the epilogue.
 *   zeros:  q - (z - 2^(bits-1)) before the scale; exact.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "candidates.h"
#include "converters.cuh"

namespace trt_woq {
namespace gemv {

constexpr int kMaxM = 16;
constexpr int kMaxWarps = 8;

template <typename T>
struct Args {
    const T* x;                  // [m, k]
    const unsigned char* w;      // packed rows of 2 k bytes
    const T* scales;             // [k / group, n]
    const T* zeros;              // same shape or nullptr
    const T* bias;               // [n] or nullptr
    T* y;                        // [m, n]
    int m;
    int n;
    int k;
    int group;                   // k for per-channel
};

/* Weights are read once: bypass L1 so the activations (re-read by every CTA) stay there. */
__device__ __forceinline__ uint4 load_stream(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 load_cached(const void* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ uint32_t comp(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <typename T>
__device__ __forceinline__ void mma(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1);

template <>
__device__ __forceinline__ void mma<half>(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                   uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<half>(half v) {
    return __half2float(v);
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ half from_float<half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

/* Everything one warp loads for one K chunk. */
template <typename T, int BITS, int NT, int MT>
struct Chunk {
    static constexpr int kVec = BITS == 4 ? 4 : 2;  // 16-byte activation vectors per lane block (32 or 16 k)
    uint4 w[NT];
    uint4 xa[kVec];                  // activation row g
    uint4 xb[MT == 16 ? kVec : 1];   // activation row g + 8 (only when M > 8)
    T s[NT];
    T z[NT];
};

template <typename T, int BITS, bool GROUPED, int NT, int MT>
__device__ __forceinline__ void load_chunk(Chunk<T, BITS, NT, MT>& f, const Args<T>& a, int chunk, int g, int q,
                                           int n_base, bool has_zeros) {
    constexpr int I = BITS == 4 ? 4 : 2;
    constexpr int KC = BITS == 4 ? 128 : 64;
    constexpr int BK = KC / 4;
    constexpr int kVec = Chunk<T, BITS, NT, MT>::kVec;
    const int k0 = chunk * KC + q * BK;
    const bool kvalid = k0 < a.k;
    const size_t row_bytes = static_cast<size_t>(a.k) * 2;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int c = n_base + 8 * j + g;
        const bool valid = kvalid && c < a.n;
        if (valid) {
            const int r = c / I;
            const int ci = c % I;
            size_t off;
            if (BITS == 4) {
                off = r * row_bytes + static_cast<size_t>(2 * chunk + (q >> 1)) * 128 + ci * 32 + (q & 1) * 16;
            } else {
                off = r * row_bytes + static_cast<size_t>(chunk) * 128 + ci * 64 + q * 16;
            }
            f.w[j] = load_stream(a.w + off);
        } else {
            f.w[j] = make_uint4(0, 0, 0, 0);
        }
        if (GROUPED || has_zeros) {
            const size_t sidx = static_cast<size_t>(GROUPED ? k0 / a.group : 0) * a.n + c;
            if (GROUPED) {
                f.s[j] = valid ? a.scales[sidx] : from_float<T>(0.0f);
            }
            if (has_zeros) {
                f.z[j] = valid ? a.zeros[sidx] : from_float<T>(0.0f);
            }
        }
    }
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int v = 0; v < kVec; ++v) f.xa[v] = zero4;
#pragma unroll
    for (int v = 0; v < (MT == 16 ? kVec : 1); ++v) f.xb[v] = zero4;
    if (kvalid) {
        if (g < a.m) {
            const T* xr = a.x + static_cast<size_t>(g) * a.k + k0;
#pragma unroll
            for (int v = 0; v < kVec; ++v) f.xa[v] = load_cached(xr + 8 * v);
        }
        if (MT == 16 && g + 8 < a.m) {
            const T* xr = a.x + static_cast<size_t>(g + 8) * a.k + k0;
#pragma unroll
            for (int v = 0; v < kVec; ++v) f.xb[v] = load_cached(xr + 8 * v);
        }
    }
}

template <typename T, int BITS, bool GROUPED, int NT, int MT>
__device__ __forceinline__ void compute_chunk(const Chunk<T, BITS, NT, MT>& f, float (&acc)[NT][4], bool has_zeros) {
    using P = typename Pair<T>::type;
    constexpr int half_bits = 1 << (BITS - 1);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        P s2, z2;
        if (GROUPED) s2 = P(f.s[j], f.s[j]);
        if (has_zeros) {
            const T zq = from_float<T>(to_float(f.z[j]) - static_cast<float>(half_bits));  // exact: small integers
            z2 = P(zq, zq);
        }
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {
            P p[BITS == 4 ? 4 : 2];
            convert_word<T, BITS>(comp(f.w[j], wi), p);
#pragma unroll
            for (int i = 0; i < (BITS == 4 ? 4 : 2); ++i) {
                if (has_zeros) p[i] = __hsub2(p[i], z2);
                if (GROUPED) p[i] = __hmul2(p[i], s2);
            }
            // Step h covers block elements 16h + {2wi, 2wi+1} (b0) and 16h + 8 + {2wi, 2wi+1} (b1).
#pragma unroll
            for (int h = 0; h < (BITS == 4 ? 2 : 1); ++h) {
                const uint32_t a1 = MT == 16 ? comp(f.xb[MT == 16 ? 2 * h : 0], wi) : 0u;
                const uint32_t a3 = MT == 16 ? comp(f.xb[MT == 16 ? 2 * h + 1 : 0], wi) : 0u;
                mma<T>(acc[j], comp(f.xa[2 * h], wi), a1, comp(f.xa[2 * h + 1], wi), a3, detail::as_u32(p[2 * h]),
                       detail::as_u32(p[2 * h + 1]));
            }
        }
    }
}

template <typename T, int BITS, bool GROUPED, int NT, int MT>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_kernel(Args<T> a, bool has_zeros) {
    constexpr int KC = BITS == 4 ? 128 : 64;
    constexpr int kUnroll = 2;
    extern __shared__ float red[];  // [warps][NT][16][8]
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int q = lane & 3;
    const int n_base = blockIdx.x * 8 * NT;
    const int nchunks = (a.k + KC - 1) / KC;

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    int chunk = warp;
    for (; chunk + (kUnroll - 1) * warps < nchunks; chunk += kUnroll * warps) {
        Chunk<T, BITS, NT, MT> f[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) load_chunk<T, BITS, GROUPED, NT, MT>(f[u], a, chunk + u * warps, g, q, n_base, has_zeros);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) compute_chunk<T, BITS, GROUPED, NT, MT>(f[u], acc, has_zeros);
    }
    for (; chunk < nchunks; chunk += warps) {
        Chunk<T, BITS, NT, MT> f;
        load_chunk<T, BITS, GROUPED, NT, MT>(f, a, chunk, g, q, n_base, has_zeros);
        compute_chunk<T, BITS, GROUPED, NT, MT>(f, acc, has_zeros);
    }

    // Cross-warp reduction. C fragment: c0 (row g, col 2q), c1 (row g, col 2q+1), c2/c3 the same for row g + 8.
    constexpr bool upper = MT == 16;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        float* r = red + ((warp * NT + j) * 16) * 8;
        r[g * 8 + 2 * q] = acc[j][0];
        r[g * 8 + 2 * q + 1] = acc[j][1];
        if (upper) {
            r[(g + 8) * 8 + 2 * q] = acc[j][2];
            r[(g + 8) * 8 + 2 * q + 1] = acc[j][3];
        }
    }
    __syncthreads();
    const int outputs = NT * 16 * 8;
    for (int o = threadIdx.x; o < outputs; o += blockDim.x) {
        const int j = o / 128;
        const int row = (o / 8) % 16;
        const int col = o % 8;
        const int c = n_base + 8 * j + col;
        if (row >= a.m || c >= a.n) continue;
        float sum = 0.0f;
        for (int w = 0; w < warps; ++w) sum += red[((w * NT + j) * 16 + row) * 8 + col];
        if (!GROUPED) sum *= to_float(a.scales[c]);
        if (a.bias != nullptr) sum += to_float(a.bias[c]);
        a.y[static_cast<size_t>(row) * a.n + c] = from_float<T>(sum);
    }
}

/* ---- host side ---- */

int chunk_k(int bits) {
    return bits == 4 ? 128 : 64;
}

/* Warps per CTA: enough resident warps to keep ~32 KB of loads in flight per SM, at least 2 chunks per warp. */
int pick_warps(int64_t ctas, int64_t nchunks) {
    const int64_t target_warps = 132 * 16;
    int warps = 4;
    while (warps < kMaxWarps && ctas * warps < target_warps) warps *= 2;
    while (warps > 1 && nchunks < 2 * warps) warps /= 2;
    return warps;
}

template <typename T, int BITS, bool GROUPED, int NT>
trt_woq_status launch_typed(const trt_woq_linear_params* p, cudaStream_t stream) {
    Args<T> a;
    a.x = static_cast<const T*>(p->activation);
    a.w = static_cast<const unsigned char*>(p->packed_weight);
    a.scales = static_cast<const T*>(p->scales);
    a.zeros = static_cast<const T*>(p->zeros);
    a.bias = static_cast<const T*>(p->bias);
    a.y = static_cast<T*>(p->output);
    a.m = static_cast<int>(p->m);
    a.n = static_cast<int>(p->n);
    a.k = static_cast<int>(p->k);
    a.group = p->group_size == -1 ? a.k : p->group_size;
    const int64_t ctas = (p->n + 8 * NT - 1) / (8 * NT);
    const int64_t nchunks = (p->k + chunk_k(BITS) - 1) / chunk_k(BITS);
    const int warps = pick_warps(ctas, nchunks);
    const size_t smem = static_cast<size_t>(warps) * NT * 16 * 8 * sizeof(float);
    if (a.m > 8) {
        gemv_kernel<T, BITS, GROUPED, NT, 16><<<static_cast<unsigned>(ctas), warps * 32, smem, stream>>>(a, p->zeros != nullptr);
    } else {
        gemv_kernel<T, BITS, GROUPED, NT, 8><<<static_cast<unsigned>(ctas), warps * 32, smem, stream>>>(a, p->zeros != nullptr);
    }
    return check_launch();
}

template <int NT>
trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    const bool grouped = p->group_size != -1;
    const bool bf16 = p->act_type == TRT_WOQ_ACT_BF16;
    if (p->bits == 4) {
        if (bf16) return grouped ? launch_typed<__nv_bfloat16, 4, true, NT>(p, stream) : launch_typed<__nv_bfloat16, 4, false, NT>(p, stream);
        return grouped ? launch_typed<half, 4, true, NT>(p, stream) : launch_typed<half, 4, false, NT>(p, stream);
    }
    if (bf16) return grouped ? launch_typed<__nv_bfloat16, 8, true, NT>(p, stream) : launch_typed<__nv_bfloat16, 8, false, NT>(p, stream);
    return grouped ? launch_typed<half, 8, true, NT>(p, stream) : launch_typed<half, 8, false, NT>(p, stream);
}

trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm) {
    if (sm < 80) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    if (p->m > kMaxM) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    // int offsets inside the kernel: packed row offsets are size_t, element counts must fit int.
    if (p->k > (1 << 30) / 2 || p->n > (1 << 30) || p->m * p->k > (int64_t{1} << 31) - 1) {
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
    return TRT_WOQ_OK;
}

size_t no_workspace(const trt_woq_linear_params*, int32_t) {
    return 0;
}

/* Channels per CTA: fewer for small N (more CTAs), more for large M (activation reuse across tiles).
 * Chosen from the benchmark on H100 (docs/performance.md); every variant is correct for every supported shape. */
template <int NT>
int32_t score(const trt_woq_linear_params* p, int32_t) {
    int preferred = p->m <= 4 ? 2 : 4;
    if (p->n < 2048) preferred = 1;
    return NT == preferred ? 100 : 10 - NT;
}

}  // namespace gemv

// NT = tiles of 8 output channels per CTA. For compilation speed only these three are built.
const Candidate kGemvCandidates[] = {
    {"gemv_mma_nt1", gemv::supports, gemv::no_workspace, gemv::launch<1>, gemv::score<1>},
    {"gemv_mma_nt2", gemv::supports, gemv::no_workspace, gemv::launch<2>, gemv::score<2>},
    {"gemv_mma_nt4", gemv::supports, gemv::no_workspace, gemv::launch<4>, gemv::score<4>},
};
const int kGemvCandidateCount = sizeof(kGemvCandidates) / sizeof(kGemvCandidates[0]);

}  // namespace trt_woq
