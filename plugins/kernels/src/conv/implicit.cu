/*
 * Conv2d as a true implicit GEMM (candidate `conv_implicit`): Y^T[N, M] = W^T[N, K] X_patches^T[K, M] on mma.sync
 * m16n8k16 with FP32 accumulation, the weights (layout 1) as the A operand and the output pixels as B, so one
 * converted weight fragment feeds every pixel of the tile. Nothing but the output is written to global memory.
 *
 * Tensors: activation NCHW and output NCHW (kernels.h, TensorRT's kLINEAR), weight K order (c, i, j) as packed by
 * graph_passes/op_conv.py. For a fixed k = (c, i, j), consecutive output pixels of a row read consecutive input
 * elements (stride 1), so the gather is coalesced along the pixels even though each element is its own 2-byte load.
 *
 * Tiles
 *   CTA   = 4 warps, 64 output channels (warp w: channels 16w .. 16w + 15 as A rows 0..15) x 64 output pixels (8 mma
 *           column tiles of 8), K in chunks of 64. grid = (split, pixel tiles, channel tiles). The channels-last
 *           path may run 8 warps in two K slices of each chunk (SLICES, conv_implicit_cl::launch).
 *   A     = per chunk, the 64 channels' 128-byte lines of layout 1 (16 INT4 or 32 INT8 packed rows), copied with
 *           cp.async into an 8-stage (INT4) or 5-stage (INT8) ring, rows padded to 144 bytes (conflict-free fragment
 *           reads). Lane (g, q) takes word q of each permutation block of channels 16w + g and 16w + 8 + g: exactly
 *           its A fragment words.
 *   B     = per chunk, the 64 pixels x 64 k patch tile, gathered by the CTA into registers two chunks ahead (thread:
 *           one 8-k vector of 4 pixels; lanes on consecutive pixels). A per-chunk table in shared memory maps k to
 *           the offset c * H * W + i * dh * W + j * dw and the bit of tap (i, j); each pixel holds the 64-bit mask of
 *           its taps inside the input (zero padding, and pixels past M), so an element costs a mask test, an address
 *           and a predicated load. Stored as 16-byte rows with an XOR swizzle, read with ldmatrix.x4.
 *   split = on SM90 the K range is split over a thread-block cluster of up to 8 CTAs (16 on the channels-last path;
 *           the batch-1 convs have 8-20 tiles for 132 SMs); the partial sums meet in distributed shared memory, each rank reducing every
 *           split-th channel of the tile: no workspace, no second kernel.
 *   store = FP32 sum x per-channel scale (grouped scales multiply the converted weights before the mma), + bias,
 *           the fused epilogue (epilogue.cuh), one rounding, written straight into the NCHW output.
 */
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "candidates.h"
#include "conv/implicit.h"
#include "conv/transpose.cuh"
#include "converters.cuh"
#include "epilogue.cuh"
#include "pdl.cuh"

namespace trt_woq {
namespace conv_implicit {
namespace {

constexpr int kWarps = 4;             // warps of one K slice (16 channels each)
constexpr int kThreads = kWarps * 32;  // threads of one K slice
constexpr int BN = 16 * kWarps;        // output channels per CTA
constexpr int BM = 64;           // output pixels per CTA
constexpr int KC = 64;           // k per chunk
constexpr int kTables = 4;       // k-table ring (written 4 chunks ahead, read 2 ahead)
constexpr int kMaxSplit = 8;     // portable cluster size (the NCHW variant)
constexpr int kMaxSplitCL = 16;  // SM90's non-portable cluster size (the channels-last variant)
constexpr int kLine = 144;       // bytes per staged packed row (128 + 16 padding)
constexpr int kRedStride = BM + 8;  // floats per channel row of the reduction buffer

template <typename T>
struct Args {
    const T* x;
    const unsigned char* w;
    const T* scales;
    const T* zeros;
    const T* bias;
    T* y;
    trt_woq_conv_geometry g;
    int m;
    int n;
    int k;
    int group_shift;  // log2(group size); per channel: unused
    int chunks_per_split;
    Epilogue ep;
};

/* CL: channels-last gather (K order (i, j, c)): the patch tile is copied by cp.async into the stage ring beside the
 * weights. Otherwise (NCHW, K order (c, i, j)) it is gathered into registers into two B buffers. */
template <int BITS, bool CL>
struct Geo {
    static constexpr int I = BITS == 4 ? 4 : 2;             // channels per packed row
    // Ring: kStages - 1 chunks in flight from DRAM (the weight bytes in flight per SM are what the batch-1 convs'
    // bandwidth needs). NCHW: as many as 48 KB of shared memory hold; CL (its stages also hold the patch tile): as
    // many as keep 3 CTAs on an SM (66 KB INT4, 67 KB INT8).
    static constexpr int kStages = CL ? (BITS == 4 ? 6 : 5) : BITS == 4 ? 8 : 5;
    static constexpr int kRows = BN / I;                    // packed rows per CTA
    static constexpr int kABytes = kRows * kLine;           // one A stage
    static constexpr int kSZBytes = 2 * 2 * BN * 2;         // scales + zeros, up to 2 groups per chunk, 2 bytes each
    static constexpr int kBBytes = BM * KC * 2;             // one B buffer
    static constexpr int kBBuffers = CL ? kStages : 2;
    static constexpr int kTBytes = CL ? 0 : KC * 16;        // one k table
    static constexpr int kPipe = kStages * (kABytes + kSZBytes) + kBBuffers * kBBytes + kTables * kTBytes;
    static_assert(CL || kPipe <= 48 * 1024, "NCHW: no opt-in to more dynamic shared memory");
    static constexpr int kRed = BN * kRedStride * 4;
    static constexpr int kSmem = kPipe > kRed ? kPipe : kRed;
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async(uint32_t dst, const void* src, int bytes, bool valid) {
    if (bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

/* A 16-bit load predicated on `ok` (0 otherwise): no branch around it, so the gather's 32 loads per chunk are all in
 * flight at once (a branch per load would make the scheduler wait for each one). */
__device__ __forceinline__ unsigned short ldg_u16_if(const void* p, bool ok) {
    unsigned short v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %2, 0;\n\tmov.u16 %0, 0;\n\t@q ld.global.nc.u16 %0, [%1];\n\t}"
        : "=h"(v)
        : "l"(p), "r"(uint32_t(ok)));
    return v;
}

/* Byte offset of 16-byte vector `v` (8 k) of pixel row `p` in a B buffer: rows of 128 bytes, XOR swizzle so that 8
 * consecutive rows at the same v hit 8 different bank groups (the gather's stores and ldmatrix's row reads). */
__device__ __forceinline__ uint32_t b_offset(int p, int v) { return p * 128 + ((v ^ (p & 7)) << 4); }

template <typename T>
__device__ __forceinline__ typename Pair<T>::type splat(T v) {
    typename Pair<T>::type p;
    p.x = v;
    p.y = v;
    return p;
}

/* Entry k of a chunk's k table: the offset of x[c][i dh][j dw] from x[0][0][0], and the bit of tap (i, j) in a
 * pixel's 64-bit mask of taps inside the input (low word, high word). */
__device__ __forceinline__ int4 table_entry(const trt_woq_conv_geometry& g, int k) {
    const int taps = g.kernel_h * g.kernel_w;
    const int c = k / taps, tap = k - c * taps;
    const int i = tap / g.kernel_w, j = tap - i * g.kernel_w;
    const int off = (c * g.in_h + i * g.dilation_h) * g.in_w + j * g.dilation_w;
    return make_int4(off, tap < 32 ? int(1u << tap) : 0, tap < 32 ? 0 : int(1u << (tap - 32)), 0);
}

/* A thread's share of one chunk's patch tile: 8 k (one 16-byte vector) of 4 pixels, as loaded. Packed into pairs
 * only when stored: a use right after the loads would stall the warp for their whole latency every chunk. */
struct Gathered {
    unsigned short v[4][8];
};

/* SLICES: the CTA's warps in K slices of one chunk (1: 4 warps; 2: 8 warps, slice s taking the chunk's k16 steps 2s
 * and 2s + 1, its partial sums added in shared memory before the reduction): twice the warps on the same tile, each
 * with half of every chunk's serial chain of conversions and mma (the batch-1 convs are latency-bound per chunk).
 * Both keep 3 CTAs per SM (the plan's residency): 8 warps within 80 registers. */
template <typename T, int BITS, bool GROUPED, bool ZEROS, bool CLUSTER, bool CL, int SLICES>
__global__ void __launch_bounds__(kThreads* SLICES, SLICES == 2 ? 3 : 1) conv_implicit_kernel(Args<T> a) {
    static_assert((SLICES == 1 || SLICES == 2) && (CL || SLICES == 1), "K slices: 1, or 2 on the channels-last path");
    constexpr int kCtaThreads = kThreads * SLICES;
    constexpr int kPixStride = kCtaThreads / 8, kPix = BM / kPixStride;  // a thread's patch pixels: pix0 + stride s
    using P = typename Pair<T>::type;
    using G = Geo<BITS, CL>;
    constexpr int kStages = G::kStages;
    constexpr int half_bits = 1 << (BITS - 1);
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char* a_ring = smem;
    unsigned char* sz_ring = a_ring + kStages * G::kABytes;
    unsigned char* b_buf = sz_ring + kStages * G::kSZBytes;
    int4* tables = reinterpret_cast<int4*>(b_buf + G::kBBuffers * G::kBBytes);

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31, gq = lane >> 2, q = lane & 3;
    const int cw = warp % kWarps, slice = warp / kWarps;  // 16-channel group, K slice
    const int split = gridDim.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.z * BN;
    const trt_woq_conv_geometry& g = a.g;
    const int nchunks = a.k / KC;
    const int c_begin = blockIdx.x * a.chunks_per_split;
    const int c_count = max(0, min(nchunks, c_begin + a.chunks_per_split) - c_begin);
    const int group = GROUPED ? 1 << a.group_shift : a.k;
    const int groups_per_chunk = group < KC ? KC / group : 1;  // 2 for group 32

    // ---- the gather's fixed part: vector `vec` (k 8 vec .. 8 vec + 7 of each chunk) of pixels pix0 + kPixStride s; CL:
    // the 8 vectors of a pixel on consecutive lanes (a pixel's channels are contiguous), else the pixels ----
    const int vec = CL ? tid & 7 : tid >> 4;
    const int pix0 = CL ? tid >> 3 : tid & 15;
    const int ohw = g.out_h * g.out_w;
    const T* xp[kPix];        // x at (b, iy0, ix0) of the pixel: tap (c, i, j) reads xp + its offset
    uint32_t mask[kPix][2];  // taps (i, j) that fall inside the input; none for pixels past M
#pragma unroll
    for (int s4 = 0; s4 < kPix; ++s4) {
        const int gm = m0 + pix0 + kPixStride * s4;
        mask[s4][0] = mask[s4][1] = 0;
        xp[s4] = a.x;
        if (gm < a.m) {
            const int b = gm / ohw, r = gm - b * ohw;
            const int oy = r / g.out_w, ox = r - oy * g.out_w;
            const int iy0 = oy * g.stride_h - g.pad_top, ix0 = ox * g.stride_w - g.pad_left;
            xp[s4] = a.x + (CL ? ((int64_t(b) * g.in_h + iy0) * g.in_w + ix0) * g.in_channels
                               : (int64_t(b) * g.in_channels * g.in_h + iy0) * g.in_w + ix0);
            uint64_t taps_in = 0;
            for (int i = 0; i < g.kernel_h; ++i) {
                const bool row_in = unsigned(iy0 + i * g.dilation_h) < unsigned(g.in_h);
                for (int j = 0; j < g.kernel_w; ++j) {
                    if (row_in && unsigned(ix0 + j * g.dilation_w) < unsigned(g.in_w)) {
                        taps_in |= uint64_t(1) << (i * g.kernel_w + j);
                    }
                }
            }
            mask[s4][0] = uint32_t(taps_in);
            mask[s4][1] = uint32_t(taps_in >> 32);
        }
    }

    auto write_table = [&](int rel) {  // chunk c_begin + rel into its ring slot (threads 0 .. KC-1)
        if (!CL && tid < KC && rel < c_count) {
            tables[(rel % kTables) * KC + tid] = table_entry(g, (c_begin + rel) * KC + tid);
        }
    };
    // CL: this thread's vector of the next chunk for its 4 pixels, 16 bytes each by cp.async into the chunk's stage
    // (zero-filled outside the input). in_channels % 8 == 0 keeps a vector inside one tap. The chunks are copied in
    // order, so the vector's (tap, c) and (i, j) advance by KC per call: no division in the loop.
    int cl_c = 0, cl_tap = 0, cl_i = 0, cl_j = 0;
    if constexpr (CL) {
        const int k0 = c_begin * KC + 8 * vec;
        cl_tap = k0 / g.in_channels;
        cl_c = k0 - cl_tap * g.in_channels;
        cl_i = cl_tap / g.kernel_w;
        cl_j = cl_tap - cl_i * g.kernel_w;
    }
    auto copy_patches = [&](int stage) {
        const int tap = cl_tap, c = cl_c;
        const int off = (cl_i * g.dilation_h * g.in_w + cl_j * g.dilation_w) * g.in_channels + c;
        for (cl_c += KC; cl_c >= g.in_channels; cl_c -= g.in_channels) {
            ++cl_tap;
            if (++cl_j == g.kernel_w) {
                cl_j = 0;
                ++cl_i;
            }
        }
        const uint32_t lo = tap < 32 ? 1u << tap : 0u, hi = tap < 32 ? 0u : 1u << (tap - 32);
        const uint32_t base = smem_u32(b_buf + stage * G::kBBytes);
#pragma unroll
        for (int s4 = 0; s4 < kPix; ++s4) {
            const bool ok = ((mask[s4][0] & lo) | (mask[s4][1] & hi)) != 0;
            cp_async(base + b_offset(pix0 + kPixStride * s4, vec), ok ? xp[s4] + off : a.x, 16, ok);
        }
    };
    auto gather = [&](int rel, Gathered& out) {
        const int4* t = tables + (rel % kTables) * KC + vec * 8;
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            const int4 t0 = t[e], t1 = t[e + 1];
#pragma unroll
            for (int s4 = 0; s4 < kPix; ++s4) {
                const bool ok0 = ((mask[s4][0] & uint32_t(t0.y)) | (mask[s4][1] & uint32_t(t0.z))) != 0;
                const bool ok1 = ((mask[s4][0] & uint32_t(t1.y)) | (mask[s4][1] & uint32_t(t1.z))) != 0;
                out.v[s4][e] = ldg_u16_if(xp[s4] + t0.x, ok0);
                out.v[s4][e + 1] = ldg_u16_if(xp[s4] + t1.x, ok1);
            }
        }
    };
    auto store_gathered = [&](int rel, const Gathered& in) {
        const uint32_t base = smem_u32(b_buf + (rel & 1) * G::kBBytes);
#pragma unroll
        for (int s4 = 0; s4 < kPix; ++s4) {
            uint32_t w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) w[e] = uint32_t(in.v[s4][2 * e]) | (uint32_t(in.v[s4][2 * e + 1]) << 16);
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(base + b_offset(pix0 + kPixStride * s4, vec)),
                         "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                         : "memory");
        }
    };

    // ---- A copies: the CTA's packed rows for one chunk, plus its scales / zeros when grouped ----
    const int row0 = n0 / G::I;
    const int rows_total = a.n / G::I;
    auto issue_weights = [&](int rel) {  // no commit: issue_a's, or the prologue's
        if (rel < c_count) {
            const int chunk = c_begin + rel;
            const int stage = rel % kStages;
            const uint32_t dst = smem_u32(a_ring + stage * G::kABytes);
#pragma unroll
            for (int i = tid; i < G::kRows * 8; i += kCtaThreads) {
                const int r = i >> 3, seg = i & 7;
                const bool ok = row0 + r < rows_total;
                const unsigned char* src = a.w + (size_t(ok ? row0 + r : 0) * a.k * 2 + size_t(chunk) * 128 + seg * 16);
                cp_async(dst + r * kLine + seg * 16, src, 16, ok);
            }
            if constexpr (GROUPED) {
                // 32 threads per (group row, tensor): 4 bytes = 2 channels each.
                const uint32_t sz = smem_u32(sz_ring + stage * G::kSZBytes);
                const int which = tid >> 5;  // 0, 1: scales of group 0 / 1; 2, 3: zeros of group 0 / 1
                const int gi = which & 1;
                const bool want = which < 4 && gi < groups_per_chunk && (which < 2 || ZEROS);
                if (want) {
                    const int nn = n0 + 2 * (tid & 31);
                    const int grow = (chunk * KC + gi * group) >> a.group_shift;
                    const T* src = (which < 2 ? a.scales : a.zeros) + size_t(grow) * a.n + (nn < a.n ? nn : 0);
                    cp_async(sz + ((which >> 1) * 2 + gi) * BN * 2 + 4 * (tid & 31), src, 4, nn < a.n);
                }
            }
        }
    };
    auto issue_a = [&](int rel) {
        if constexpr (CL) {
            if (rel < c_count) copy_patches(rel % kStages);
        }
        issue_weights(rel);
        cp_commit();
    };

    // Per-channel zero points (q - (z - 2^(bits-1)), exact) of this lane's two channels.
    P zlo = splat<T>(T(0.f)), zhi = zlo;
    if constexpr (ZEROS && !GROUPED) {
        const int clo = n0 + 16 * cw + gq, chi = clo + 8;
        if (clo < a.n) zlo = splat<T>(T(float(a.zeros[clo]) - half_bits));
        if (chi < a.n) zhi = splat<T>(T(float(a.zeros[chi]) - half_bits));
    }

    float acc[8][4];
#pragma unroll
    for (int t = 0; t < 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

    // ---- prologue: tables, A copies, the patches of chunks 0 (in shared memory) and 1 (in registers) ----
#pragma unroll
    for (int r = 0; r < kTables; ++r) write_table(r);
    if constexpr (CL) {
        // The weights of the first stages stream before the wait for the kernel ahead (the NCHW input's transpose,
        // launched as its programmatic dependent: conv_implicit_cl::launch); the patches after it. Group st holds
        // the patches of stage st and the weights of stages <= st, so the main loop's waits keep their meaning.
#pragma unroll
        for (int st = 0; st < kStages - 1; ++st) issue_weights(st);
        pdl_wait();
#pragma unroll
        for (int st = 0; st < kStages - 1; ++st) {
            if (st < c_count) copy_patches(st % kStages);
            cp_commit();
        }
    } else {
#pragma unroll
        for (int st = 0; st < kStages - 1; ++st) issue_a(st);
    }
    __syncthreads();
    Gathered ga, gb;  // NCHW: the chunks rel + 1 and rel + 2 in flight: ga for even rel, gb for odd
    if constexpr (!CL) {
        if (c_count > 0) {
            gather(0, ga);
            store_gathered(0, ga);
        }
        if (c_count > 1) gather(1, gb);
    }

    // A fragment word offsets inside a stage: channel 16w + g (lo) and 16w + 8 + g (hi).
    const int clo = 16 * cw + gq, chi = clo + 8;
    const uint32_t a_lo = (clo / G::I) * kLine + (clo % G::I) * (BITS == 4 ? 32 : 64) + q * 4;
    const uint32_t a_hi = (chi / G::I) * kLine + (chi % G::I) * (BITS == 4 ? 32 : 64) + q * 4;
    // ldmatrix row address of this lane: matrix lane / 8 = (column tile +0/+1, k half), row lane % 8.
    const int lm_pix = ((lane >> 4) << 3) + (lane & 7);
    const int lm_khalf = (lane >> 3) & 1;

    // Chunk rel: its patches were gathered two chunks earlier and stored at the end of the previous step; the loads
    // of chunk rel + 2 fly during this step's mma and land in `fill`, while `drain` (chunk rel + 1) is stored.
    auto step = [&](int rel, Gathered& fill, Gathered& drain) {
        if (!CL && rel + 2 < c_count) gather(rel + 2, fill);
        cp_wait<kStages - 2>();
        __syncthreads();
        write_table(rel + kTables);
        issue_a(rel + kStages - 1);

        const int stage = rel % kStages;
        const unsigned char* as = a_ring + stage * G::kABytes;
        const uint32_t bs = smem_u32(b_buf + (CL ? stage : rel & 1) * G::kBBytes);
        const T* ss = reinterpret_cast<const T*>(sz_ring + stage * G::kSZBytes);
        // Zero points, then group scales, on one word's converted pairs of channels clo / chi (group gi of the chunk).
        auto dequant = [&](auto& lo, auto& hi, int gi) {
            constexpr int kPairs = std::extent<std::remove_reference_t<decltype(lo)>>::value;
            [[maybe_unused]] P slo, shi;
            P zl = zlo, zh = zhi;
            if constexpr (GROUPED) {
                slo = splat<T>(ss[gi * BN + clo]);
                shi = splat<T>(ss[gi * BN + chi]);
                if constexpr (ZEROS) {
                    zl = splat<T>(T(float(ss[(2 + gi) * BN + clo]) - half_bits));
                    zh = splat<T>(T(float(ss[(2 + gi) * BN + chi]) - half_bits));
                }
            }
#pragma unroll
            for (int i = 0; i < kPairs; ++i) {
                if constexpr (ZEROS) {
                    lo[i] = __hsub2(lo[i], zl);
                    hi[i] = __hsub2(hi[i], zh);
                }
                if constexpr (GROUPED) {
                    lo[i] = __hmul2(lo[i], slo);
                    hi[i] = __hmul2(hi[i], shi);
                }
            }
        };
        // This warp's k16 steps of the chunk (all four, or its slice's two): A fragments (converted, zero-shifted,
        // group-scaled) of its 16 channels. Step kk of the chunk is af[kk - kk0].
        constexpr int kSteps = 4 / SLICES;
        const int kk0 = slice * kSteps;
        uint32_t af[kSteps][4];
        if constexpr (BITS == 4) {
#pragma unroll
            for (int bi = 0; bi < kSteps / 2; ++bi) {
                const int blk = kk0 / 2 + bi;  // one word per channel holds the k of steps 2 blk, 2 blk + 1
                P plo[4], phi[4];
                convert_word<T, 4>(*reinterpret_cast<const uint32_t*>(as + a_lo + blk * 16), plo);
                convert_word<T, 4>(*reinterpret_cast<const uint32_t*>(as + a_hi + blk * 16), phi);
                dequant(plo, phi, groups_per_chunk > 1 ? blk : 0);
                // pairs 0, 1: step 2 blk (k slots 2q.. / 2q+8..); pairs 2, 3: step 2 blk + 1.
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    af[2 * bi + h][0] = detail::as_u32(plo[2 * h]);
                    af[2 * bi + h][1] = detail::as_u32(phi[2 * h]);
                    af[2 * bi + h][2] = detail::as_u32(plo[2 * h + 1]);
                    af[2 * bi + h][3] = detail::as_u32(phi[2 * h + 1]);
                }
            }
        } else {
#pragma unroll
            for (int ki = 0; ki < kSteps; ++ki) {
                const int kk = kk0 + ki;
                P plo[2], phi[2];
                convert_word<T, 8>(*reinterpret_cast<const uint32_t*>(as + a_lo + kk * 16), plo);
                convert_word<T, 8>(*reinterpret_cast<const uint32_t*>(as + a_hi + kk * 16), phi);
                dequant(plo, phi, groups_per_chunk > 1 ? kk >> 1 : 0);
                af[ki][0] = detail::as_u32(plo[0]);
                af[ki][1] = detail::as_u32(phi[0]);
                af[ki][2] = detail::as_u32(plo[1]);
                af[ki][3] = detail::as_u32(phi[1]);
            }
        }
#pragma unroll
        for (int ki = 0; ki < kSteps; ++ki) {
#pragma unroll
            for (int tp = 0; tp < 4; ++tp) {  // column tiles 2 tp, 2 tp + 1
                uint32_t b[4];
                ldmatrix_x4(b, bs + b_offset(16 * tp + lm_pix, 2 * (kk0 + ki) + lm_khalf));
                mma_m16n8k16<T>(acc[2 * tp], af[ki][0], af[ki][1], af[ki][2], af[ki][3], b[0], b[1]);
                mma_m16n8k16<T>(acc[2 * tp + 1], af[ki][0], af[ki][1], af[ki][2], af[ki][3], b[2], b[3]);
            }
        }
        if (!CL && rel + 1 < c_count) store_gathered(rel + 1, drain);
    };
    for (int rel = 0; rel < c_count; rel += 2) {
        step(rel, ga, gb);
        if (rel + 1 < c_count) step(rel + 1, gb, ga);
    }
    cp_wait<0>();
    __syncthreads();  // the pipeline's shared memory becomes the reduction buffer

    // ---- partial sums -> shared memory [channel][pixel]: the last K slice stores, the others add theirs ----
    float* red = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int s = SLICES - 1; s >= 0; --s) {
        if (slice == s) {
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                float2* lo = reinterpret_cast<float2*>(red + clo * kRedStride + 8 * t + 2 * q);
                float2* hi = reinterpret_cast<float2*>(red + chi * kRedStride + 8 * t + 2 * q);
                const float2 vl = s == SLICES - 1 ? make_float2(0.f, 0.f) : *lo;
                const float2 vh = s == SLICES - 1 ? make_float2(0.f, 0.f) : *hi;
                *lo = make_float2(vl.x + acc[t][0], vl.y + acc[t][1]);
                *hi = make_float2(vh.x + acc[t][2], vh.y + acc[t][3]);
            }
        }
        if (s > 0) __syncthreads();
    }
    int rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    if constexpr (CLUSTER) {
        cg::this_cluster().sync();
        rank = static_cast<int>(cg::this_cluster().block_rank());
    } else {
        __syncthreads();
    }
#else
    __syncthreads();
#endif
    // ---- rank r finishes channels r, r + split, ...: sum, scale, bias, epilogue, NCHW store; 4 pixels per thread,
    // the peers' partial sums loaded 8 at a time (two DSMEM round trips for 16 peers, not split - 1 in a row; 8
    // float4 keep the 8-warp kernel within its 80 registers) ----
    constexpr int kVec = 4, kPeers = kMaxSplitCL > kMaxSplit ? kMaxSplitCL : kMaxSplit, kBatch = 8;
    const int my_channels = (BN - rank + split - 1) / split;
    for (int e = tid; e < my_channels * (BM / kVec); e += kCtaThreads) {
        const int c = rank + (e / (BM / kVec)) * split, p = (e % (BM / kVec)) * kVec;
        float4 v = *reinterpret_cast<const float4*>(red + c * kRedStride + p);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if constexpr (CLUSTER) {
#pragma unroll
            for (int r0 = 0; r0 < kPeers; r0 += kBatch) {
                if (r0 >= split) break;
                float4 peer[kBatch];
#pragma unroll
                for (int i = 0; i < kBatch; ++i) {
                    const int r = r0 + i;
                    peer[i] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (r < split && r != rank)
                        peer[i] = *reinterpret_cast<const float4*>(cg::this_cluster().map_shared_rank(red, r) +
                                                                   c * kRedStride + p);
                }
#pragma unroll
                for (int i = 0; i < kBatch; ++i) {
                    v.x += peer[i].x;
                    v.y += peer[i].y;
                    v.z += peer[i].z;
                    v.w += peer[i].w;
                }
            }
        }
#endif
        const int gn = n0 + c;
        if (gn >= a.n) continue;
        const float sc = GROUPED ? 1.f : float(a.scales[gn]), bn = a.bias != nullptr ? float(a.bias[gn]) : 0.f;
        const float y[kVec] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
            const int gmm = m0 + p + i;
            if (gmm < a.m) {
                const int b = gmm / ohw, r = gmm - b * ohw;
                a.y[(int64_t(b) * a.n + gn) * ohw + r] = T(apply_epilogue(y[i] * sc + bn, a.ep));
            }
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (CLUSTER) cg::this_cluster().sync();  // the others keep reading this CTA's partial sums until here
#endif
}

int log2_exact(int v) {
    int s = 0;
    while ((1 << s) < v) ++s;
    return s;
}

struct LaunchPlan {
    int split;
    int chunks_per_split;
    int mtiles;
    int ntiles;
};

/* `max_split`: the largest cluster; `resident`: CTAs per SM (shared memory bound). */
LaunchPlan plan_of(const trt_woq_linear_params* p, int32_t sm, int sms, int max_split, int resident) {
    LaunchPlan pl{};
    pl.mtiles = static_cast<int>((p->m + BM - 1) / BM);
    pl.ntiles = static_cast<int>((p->n + BN - 1) / BN);
    const int nchunks = static_cast<int>(p->k / KC);
    const int64_t tiles = int64_t(pl.mtiles) * pl.ntiles;
    // Split K (SM90: over a cluster) to fill the SMs: the split with the least work on the busiest SM, counted as
    // waves of `resident` CTAs per SM (they hide each other's latencies: one CTA's warps alone issue an
    // instruction every ~5 cycles) times chunks per CTA; ties keep the smaller split.
    int split = 1;
    int64_t best = -1;
    for (int s = 1; s <= (sm >= 90 ? max_split : 1); ++s) {
        const int64_t cps = (nchunks + s - 1) / s;
        const int64_t cost = (tiles * s + resident * sms - 1) / (resident * sms) * cps;
        if (best < 0 || cost < best) {
            best = cost;
            split = s;
        }
    }
    pl.chunks_per_split = (nchunks + split - 1) / split;
    pl.split = (nchunks + pl.chunks_per_split - 1) / pl.chunks_per_split;
    return pl;
}

int device_sms() {
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
}

/* `programmatic`: a programmatic dependent of the kernel ahead (the transpose), waiting for it in the prologue. */
template <typename T, int BITS, bool GROUPED, bool ZEROS, bool CLUSTER, bool CL, int SLICES>
trt_woq_status launch_kernel(const trt_woq_linear_params* p, const T* x, const LaunchPlan& pl, bool programmatic,
                             cudaStream_t stream) {
    const Args<T> a = {x,                                    static_cast<const unsigned char*>(p->packed_weight),
                       static_cast<const T*>(p->scales),     static_cast<const T*>(p->zeros),
                       static_cast<const T*>(p->bias),       static_cast<T*>(p->output),
                       p->conv,                              static_cast<int>(p->m),
                       static_cast<int>(p->n),               static_cast<int>(p->k),
                       GROUPED ? log2_exact(p->group_size) : 0, pl.chunks_per_split,
                       epilogue_of(*p)};
    auto kernel = conv_implicit_kernel<T, BITS, GROUPED, ZEROS, CLUSTER, CL, SLICES>;
    constexpr int smem = Geo<BITS, CL>::kSmem;
    if constexpr (smem > 48 * 1024 || CL) {  // once per kernel (thread-safe static initialisation)
        static const cudaError_t opt_in = [&] {
            cudaError_t e = smem > 48 * 1024
                                ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)
                                : cudaSuccess;
            if (e == cudaSuccess && CL && CLUSTER) {
                e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
            }
            return e;
        }();
        if (opt_in != cudaSuccess) return record_cuda_error(opt_in);
    }
    return launch_ex(kernel, dim3(pl.split, pl.mtiles, pl.ntiles), dim3(kThreads * SLICES), smem,
                     CLUSTER ? static_cast<unsigned>(pl.split) : 1u, programmatic, stream, a);
}

template <typename T, int BITS, bool CL, int SLICES>
trt_woq_status launch_bits(const trt_woq_linear_params* p, const T* x, const LaunchPlan& pl, bool programmatic,
                           cudaStream_t stream) {
    const bool grouped = p->group_size != -1, zeros = p->zeros != nullptr, cluster = pl.split > 1;
#define TRT_WOQ_CONV_CASE(G, Z, C) \
    if (grouped == G && zeros == Z && cluster == C) return launch_kernel<T, BITS, G, Z, C, CL, SLICES>(p, x, pl, programmatic, stream);
    TRT_WOQ_CONV_CASE(false, false, false)
    TRT_WOQ_CONV_CASE(false, false, true)
    TRT_WOQ_CONV_CASE(false, true, false)
    TRT_WOQ_CONV_CASE(false, true, true)
    TRT_WOQ_CONV_CASE(true, false, false)
    TRT_WOQ_CONV_CASE(true, false, true)
    TRT_WOQ_CONV_CASE(true, true, false)
    TRT_WOQ_CONV_CASE(true, true, true)
#undef TRT_WOQ_CONV_CASE
    return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
}

/* Sizes every variant takes: int32 offsets of a pixel's taps (`reach` elements past its first), a pixel's taps in
 * its 64-bit mask, grid.y and grid.z. */
bool shape_ok(const trt_woq_linear_params* p, int64_t reach) {
    const trt_woq_conv_geometry& g = p->conv;
    return reach < (int64_t(1) << 31) && int64_t(g.kernel_h) * g.kernel_w <= 64 && p->m < int64_t(65535) * BM &&
           p->n < int64_t(65535) * BN;
}

template <bool CL, int SLICES = 1>
trt_woq_status launch_variant(const trt_woq_linear_params* p, const void* x, bool programmatic, cudaStream_t stream) {
    int dev = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess) return record_cuda_error(err);
    const LaunchPlan pl = CL ? plan_of(p, major * 10 + minor, device_sms(), kMaxSplitCL, 3)
                             : plan_of(p, major * 10 + minor, device_sms(), kMaxSplit, 2);
    using H = half;
    using B = __nv_bfloat16;
    const bool bf16 = p->act_type == TRT_WOQ_ACT_BF16;
    if (p->weight_format == TRT_WOQ_WEIGHT_INT4) {
        return bf16 ? launch_bits<B, 4, CL, SLICES>(p, static_cast<const B*>(x), pl, programmatic, stream)
                    : launch_bits<H, 4, CL, SLICES>(p, static_cast<const H*>(x), pl, programmatic, stream);
    }
    return bf16 ? launch_bits<B, 8, CL, SLICES>(p, static_cast<const B*>(x), pl, programmatic, stream)
                : launch_bits<H, 8, CL, SLICES>(p, static_cast<const H*>(x), pl, programmatic, stream);
}

}  // namespace

/* A 1 x 1 kernel's weight is the same matrix in both K orders. */
bool order_is(const trt_woq_conv_geometry& g, int32_t order) {
    return g.k_order == order || g.kernel_h * g.kernel_w == 1;
}

trt_woq_status supports(const trt_woq_linear_params* p, int32_t) {
    const trt_woq_conv_geometry& g = p->conv;
    if (!order_is(g, TRT_WOQ_CONV_K_CIJ) || g.activation_nhwc) return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
    const int64_t reach = (int64_t(g.in_channels) * g.in_h + int64_t(g.dilation_h) * (g.kernel_h - 1)) * g.in_w +
                          int64_t(g.dilation_w) * (g.kernel_w - 1);
    return shape_ok(p, reach) ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
}

size_t workspace(const trt_woq_linear_params*, int32_t) { return 0; }

/* Above conv_im2col (score 1) where it measured faster (python -m trt_woq.bench_conv times both, docs/kernels.md):
 * up to 256 output channels, and up to 512 from 128 pixels on. With more channels the im2col path's wgmma GEMM
 * wins: there the 2-byte gathers of this kernel (one LSU request per element) cost more than the patch matrix. */
int32_t score(const trt_woq_linear_params* p, int32_t) {
    return p->n <= 256 || (p->n <= 512 && p->m >= 128) ? 2 : 0;
}

trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    return launch_variant<false>(p, p->activation, false, stream);
}

}  // namespace conv_implicit

namespace conv_implicit_cl {

trt_woq_status supports(const trt_woq_linear_params* p, int32_t) {
    const trt_woq_conv_geometry& g = p->conv;
    if (!conv_implicit::order_is(g, TRT_WOQ_CONV_K_IJC)) return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
    if (g.in_channels % 8 != 0 || int64_t(g.batch) > 65535 || int64_t(g.in_h) * g.in_w > int64_t(65535) * 32) {
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;  // 16-byte vectors inside one tap; the transpose's grid
    }
    const int64_t reach =
        (int64_t(g.dilation_h) * (g.kernel_h - 1) * g.in_w + int64_t(g.dilation_w) * (g.kernel_w - 1) + 1) *
        g.in_channels;
    return conv_implicit::shape_ok(p, reach) ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
}

/* An NCHW activation's channels-last copy. */
size_t workspace(const trt_woq_linear_params* p, int32_t) {
    const trt_woq_conv_geometry& g = p->conv;
    return g.activation_nhwc ? 0 : (size_t(g.batch) * g.in_channels * g.in_h * g.in_w * 2 + 255) / 256 * 256;
}

/* Where it measured faster than conv_im2col (score 1) and, on 1 x 1 kernels, conv_implicit (python -m
 * trt_woq.bench_conv times all three, docs/kernels.md): up to 256 output channels unless M >= 1024 with K <= 1024;
 * beyond 256 channels at M <= 64, or M <= 512 with K <= 4608 (few chunks per CTA: this kernel is latency-bound per
 * chunk, the im2col path's wgmma GEMM is not). A 1 x 1 conv on an NCHW input goes to conv_implicit, which needs no
 * transpose. */
int32_t score(const trt_woq_linear_params* p, int32_t) {
    const trt_woq_conv_geometry& g = p->conv;
    if (g.kernel_h * g.kernel_w == 1 && !g.activation_nhwc) return 0;
    const bool wins = p->n <= 256 ? !(p->m >= 1024 && p->k <= 1024) : p->m <= 64 || (p->m <= 512 && p->k <= 4608);
    return wins ? 3 : 0;
}

namespace {

/* An NCHW activation is transposed into the workspace first; the conv kernel is that kernel's programmatic dependent:
 * its launch and its first weight copies overlap the transpose (1x1280 8x8, 1x512 7x7, 1x256 14x14: 0.6-0.7 us
 * faster than launched after it, H100). SLICES: the kernel's K slices. */
template <int SLICES>
trt_woq_status launch_slices(const trt_woq_linear_params* p, cudaStream_t stream) {
    const trt_woq_conv_geometry& g = p->conv;
    if (g.activation_nhwc) return conv_implicit::launch_variant<true, SLICES>(p, p->activation, false, stream);
    const trt_woq_status s =
        p->act_type == TRT_WOQ_ACT_BF16
            ? conv::transpose(static_cast<const __nv_bfloat16*>(p->activation),
                              static_cast<__nv_bfloat16*>(p->workspace), g.batch, g.in_channels, g.in_h * g.in_w,
                              stream)
            : conv::transpose(static_cast<const half*>(p->activation), static_cast<half*>(p->workspace), g.batch,
                              g.in_channels, g.in_h * g.in_w, stream);
    return s != TRT_WOQ_OK ? s : conv_implicit::launch_variant<true, SLICES>(p, p->workspace, true, stream);
}

}  // namespace

/* The K slices where they measured faster (H100, python -m trt_woq.bench_conv's cl (8 warps) and cl_w4 columns,
 * docs/kernels.md): 8 warps up to 640 output channels at M <= 512 (1 x 512 7x7, 8 x 512 7x7, 1 x 256 14x14, 1 x
 * 1024 -> 256 1x1: 3-8 % faster); 4 beyond (1280 channels: 8 warps 0-6 % slower for INT4 at batch 1, 2 and 8) and
 * at larger M (8 x 256 14x14, 56x56: 5-8 % slower). */
trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    return p->n <= 640 && p->m <= 512 ? launch_slices<2>(p, stream) : launch_slices<1>(p, stream);
}

trt_woq_status launch_w4(const trt_woq_linear_params* p, cudaStream_t stream) { return launch_slices<1>(p, stream); }

trt_woq_status launch_w8(const trt_woq_linear_params* p, cudaStream_t stream) { return launch_slices<2>(p, stream); }

int32_t score_tactic(const trt_woq_linear_params*, int32_t) { return -1; }

}  // namespace conv_implicit_cl
}  // namespace trt_woq
