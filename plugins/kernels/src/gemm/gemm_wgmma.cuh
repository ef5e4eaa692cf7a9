// Hopper (SM90a) path of the weight-only GEMM: wgmma with the dequantized weights as the register operand.
//
// wgmma takes only its A operand (the M side, 64 rows per warpgroup) from registers, so this kernel computes the
// transposed product  Y^T[N, M] = W^T[N, K] @ X^T[K, M]: output channels are wgmma's M, tokens its N. The packed
// layout v1 needs no change for this: the word that lane t reads for channel n is exactly its mma.sync B fragment,
// and wgmma's register A fragment of a warp (rows 16w .. 16w+15) is two such fragments, channels g = t/4 and g + 8:
//   a0 = (row g, k 2(t%4) + {0,1}), a1 = (row g + 8, same k), a2 = (row g, k + 8), a3 = (row g + 8, k + 8).
// The activation tile X[TOK tokens, 64 k] is wgmma's B operand in shared memory, K-major with the 128-byte swizzle
// (16-byte chunk c of row r stored at chunk c ^ (r % 8)), which is the layout the mma.sync kernel already uses for
// its A tile; descriptors advance by 32 bytes per k16 step.
//
// CTA: WGS warpgroups x 64 channels (2 x 64 = 128, or 64 for small M), TOK tokens (64 or 128), K tiles of 64 in a cp.async pipeline of
// STAGES buffers with STAGES - 2 tiles in flight: one wgmma group stays in flight while the next tile's weights are
// converted, so the buffer refilled at tile i is the one of tile i - 2. Split-K and the epilogue as gemm_mma.cuh.
#pragma once

#include "gemm_mma.cuh"

namespace trt_woq {
namespace gemm {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TRT_WOQ_WGMMA 1
#endif

#ifdef TRT_WOQ_WGMMA
// wgmma.mma_async m64nNk16 with FP32 accumulators, A from registers, B from shared memory (descriptor), FP16 / BF16
// operands, for any token count N = 16 C (C = 1 .. 16; PTX takes N in steps of 8, the token tiles here are in steps
// of 16). One asm statement per C, built from three lists of C entries: the accumulator placeholders
// (TRT_WOQ_WG_S<C>: %0 .. %8C-1), their "+f" operands (TRT_WOQ_WG_O<C>, 8 per entry) and the placeholders of the A
// registers and the descriptor that follow them (TRT_WOQ_WG_I<C>).
#define TRT_WOQ_WG_D8(b) \
    "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define TRT_WOQ_WG_S1 "%0, %1, %2, %3, %4, %5, %6, %7"
#define TRT_WOQ_WG_S2 TRT_WOQ_WG_S1 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define TRT_WOQ_WG_S3 TRT_WOQ_WG_S2 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define TRT_WOQ_WG_S4 TRT_WOQ_WG_S3 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define TRT_WOQ_WG_S5 TRT_WOQ_WG_S4 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define TRT_WOQ_WG_S6 TRT_WOQ_WG_S5 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define TRT_WOQ_WG_S7 TRT_WOQ_WG_S6 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define TRT_WOQ_WG_S8 TRT_WOQ_WG_S7 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define TRT_WOQ_WG_S9 TRT_WOQ_WG_S8 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define TRT_WOQ_WG_S10 TRT_WOQ_WG_S9 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define TRT_WOQ_WG_S11 TRT_WOQ_WG_S10 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define TRT_WOQ_WG_S12 TRT_WOQ_WG_S11 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define TRT_WOQ_WG_S13 TRT_WOQ_WG_S12 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define TRT_WOQ_WG_S14 TRT_WOQ_WG_S13 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define TRT_WOQ_WG_S15 TRT_WOQ_WG_S14 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define TRT_WOQ_WG_S16 TRT_WOQ_WG_S15 ", %120, %121, %122, %123, %124, %125, %126, %127"
#define TRT_WOQ_WG_O1 TRT_WOQ_WG_D8(0)
#define TRT_WOQ_WG_O2 TRT_WOQ_WG_O1, TRT_WOQ_WG_D8(8)
#define TRT_WOQ_WG_O3 TRT_WOQ_WG_O2, TRT_WOQ_WG_D8(16)
#define TRT_WOQ_WG_O4 TRT_WOQ_WG_O3, TRT_WOQ_WG_D8(24)
#define TRT_WOQ_WG_O5 TRT_WOQ_WG_O4, TRT_WOQ_WG_D8(32)
#define TRT_WOQ_WG_O6 TRT_WOQ_WG_O5, TRT_WOQ_WG_D8(40)
#define TRT_WOQ_WG_O7 TRT_WOQ_WG_O6, TRT_WOQ_WG_D8(48)
#define TRT_WOQ_WG_O8 TRT_WOQ_WG_O7, TRT_WOQ_WG_D8(56)
#define TRT_WOQ_WG_O9 TRT_WOQ_WG_O8, TRT_WOQ_WG_D8(64)
#define TRT_WOQ_WG_O10 TRT_WOQ_WG_O9, TRT_WOQ_WG_D8(72)
#define TRT_WOQ_WG_O11 TRT_WOQ_WG_O10, TRT_WOQ_WG_D8(80)
#define TRT_WOQ_WG_O12 TRT_WOQ_WG_O11, TRT_WOQ_WG_D8(88)
#define TRT_WOQ_WG_O13 TRT_WOQ_WG_O12, TRT_WOQ_WG_D8(96)
#define TRT_WOQ_WG_O14 TRT_WOQ_WG_O13, TRT_WOQ_WG_D8(104)
#define TRT_WOQ_WG_O15 TRT_WOQ_WG_O14, TRT_WOQ_WG_D8(112)
#define TRT_WOQ_WG_O16 TRT_WOQ_WG_O15, TRT_WOQ_WG_D8(120)
#define TRT_WOQ_WG_I1 "{%8, %9, %10, %11}, %12"
#define TRT_WOQ_WG_I2 "{%16, %17, %18, %19}, %20"
#define TRT_WOQ_WG_I3 "{%24, %25, %26, %27}, %28"
#define TRT_WOQ_WG_I4 "{%32, %33, %34, %35}, %36"
#define TRT_WOQ_WG_I5 "{%40, %41, %42, %43}, %44"
#define TRT_WOQ_WG_I6 "{%48, %49, %50, %51}, %52"
#define TRT_WOQ_WG_I7 "{%56, %57, %58, %59}, %60"
#define TRT_WOQ_WG_I8 "{%64, %65, %66, %67}, %68"
#define TRT_WOQ_WG_I9 "{%72, %73, %74, %75}, %76"
#define TRT_WOQ_WG_I10 "{%80, %81, %82, %83}, %84"
#define TRT_WOQ_WG_I11 "{%88, %89, %90, %91}, %92"
#define TRT_WOQ_WG_I12 "{%96, %97, %98, %99}, %100"
#define TRT_WOQ_WG_I13 "{%104, %105, %106, %107}, %108"
#define TRT_WOQ_WG_I14 "{%112, %113, %114, %115}, %116"
#define TRT_WOQ_WG_I15 "{%120, %121, %122, %123}, %124"
#define TRT_WOQ_WG_I16 "{%128, %129, %130, %131}, %132"
#define TRT_WOQ_WGMMA_ASM(C, N, TYPE)                                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n"                                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " {" TRT_WOQ_WG_S##C "}, "        \
                 TRT_WOQ_WG_I##C ", p, 1, 1, 0;\n}\n"                                                               \
                 : TRT_WOQ_WG_O##C                                                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))
#define TRT_WOQ_WGMMA_CASE(C, N)                                           \
    if constexpr (TOK == N) {                                              \
        if constexpr (std::is_same<T, half>::value) TRT_WOQ_WGMMA_ASM(C, N, "f16"); \
        else TRT_WOQ_WGMMA_ASM(C, N, "bf16");                              \
    }
// d += A x B for a TOK-token activation tile (wgmma's N): TOK / 2 accumulators per thread.
template <int TOK, typename T>
__device__ __forceinline__ void wgmma_tok(float (&d)[TOK / 2], const uint32_t (&a)[4], uint64_t desc) {
    static_assert(TOK % 16 == 0 && TOK >= 16 && TOK <= 256, "wgmma N: 16 .. 256 tokens in steps of 16");
    TRT_WOQ_WGMMA_CASE(1, 16) TRT_WOQ_WGMMA_CASE(2, 32) TRT_WOQ_WGMMA_CASE(3, 48) TRT_WOQ_WGMMA_CASE(4, 64)
    TRT_WOQ_WGMMA_CASE(5, 80) TRT_WOQ_WGMMA_CASE(6, 96) TRT_WOQ_WGMMA_CASE(7, 112) TRT_WOQ_WGMMA_CASE(8, 128)
    TRT_WOQ_WGMMA_CASE(9, 144) TRT_WOQ_WGMMA_CASE(10, 160) TRT_WOQ_WGMMA_CASE(11, 176) TRT_WOQ_WGMMA_CASE(12, 192)
    TRT_WOQ_WGMMA_CASE(13, 208) TRT_WOQ_WGMMA_CASE(14, 224) TRT_WOQ_WGMMA_CASE(15, 240) TRT_WOQ_WGMMA_CASE(16, 256)
}
#undef TRT_WOQ_WGMMA_CASE
#undef TRT_WOQ_WGMMA_ASM
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Shared-memory descriptor of a K-major activation tile with the 128-byte swizzle at `smem_base`: start >> 4,
// leading offset 1 (unused), stride 1024 bytes (8 rows of 128 B); + 2 per k16 step (32 bytes).
__device__ __forceinline__ uint64_t swizzle128_desc(uint32_t smem_base) {
    return uint64_t((smem_base & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
           (uint64_t(1) << 62);
}

// The conversion's form of zero point z (Ops<T>::int8_zero / int4_zero); the symmetric one is z = 2^(bits - 1).
template <int BITS, typename T>
__device__ __forceinline__ auto zero_point(float z) {
    if constexpr (BITS == 8) return Ops<T>::int8_zero(z);
    else return Ops<T>::int4_zero(z);
}
template <int BITS, typename T>
using ZeroPoint = decltype(zero_point<BITS, T>(0.f));

// Dequantizes packed word `w` (word block `blk` of this lane's channel row h: g or g + 8 of its warp's 16) into
// wgmma's register A fragments: INT8 fills k16 step blk, INT4 and FP6 steps 2 blk and 2 blk + 1. FP6: `w2` is the
// 2-bit word (as half 0), `fp6_scaled` as fp6_to_frag's `scaled`.
template <int BITS, typename T>
__device__ __forceinline__ void word_to_a_frags(uint32_t w, ZeroPoint<BITS, T> zq, typename Ops<T>::T2 s2, int blk,
                                                int h, uint32_t (&af)[kBK / 16][4], uint32_t w2 = 0,
                                                bool fp6_scaled = true) {
    using O = Ops<T>;
    if constexpr (BITS == 8) {
        O::int8_to_frag(w, zq, s2, af[blk][h], af[blk][2 + h]);
    } else {
        uint32_t b[4];
        if constexpr (BITS == 6)
            fp6_to_frag<T>(w, w2, fp6_scaled, s2, b);
        else
            O::int4_to_frag(w, zq, s2, b);
        af[2 * blk][h] = b[0];
        af[2 * blk][2 + h] = b[1];
        af[2 * blk + 1][h] = b[2];
        af[2 * blk + 1][2 + h] = b[3];
    }
}
#endif

// Shared-memory stage: X tile first (1024-byte aligned, the swizzle atom), then the packed lines, scales, zeros;
// the stage size is rounded up to 1024 bytes so every stage's X tile stays aligned.
template <int TOK, int BITS, int WGS = 2>
struct WgStage {
    static constexpr int kBN = 64 * WGS;
    static constexpr int kI = BITS == 8 ? 2 : 4;
    static constexpr int kLines = kBN / kI;
    static constexpr int kXBytes = TOK * kBK * 2;
    static constexpr int kBBytes = kLines * packed_line_bytes(BITS);
    static constexpr int kSBytes = 2 * kBN * 2;
    static constexpr int kBytes = (kXBytes + kBBytes + 2 * kSBytes + 1023) / 1024 * 1024;
};

template <int TOK, int STAGES, int BITS, typename T, int WGS = 2, int MIN_CTAS = 1>
__global__ void __launch_bounds__(WGS * 128, MIN_CTAS) gemm_wgmma_kernel(const GemmArgs args) {
#ifdef TRT_WOQ_WGMMA
    using L = WgStage<TOK, BITS, WGS>;
    using O = Ops<T>;
    constexpr int kThreads = WGS * 128, kBN = L::kBN, kI = L::kI;
    constexpr int kDist = STAGES - 2;  // tiles in flight ahead of the one being converted
    static_assert(STAGES >= 3, "one buffer converting, one under the wgmma in flight, at least one loading");

    extern __shared__ unsigned char smem_raw[];
    // Align the dynamic shared memory to 1024 bytes (the launch asks for 1024 bytes of slack).
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wq = warp & 3;  // warpgroup (64 channels each), warp within it (16 channels)
    const CtaTile ct = cta_tile<TOK, kBN>(args);
    const int m0 = ct.m0, n0 = ct.n0, kt_begin = ct.kt_begin, kt_end = ct.kt_end;
    const bool has_zeros = args.zeros != nullptr;
    const T* __restrict__ S = static_cast<const T*>(args.scales);
    const T* __restrict__ Z = static_cast<const T*>(args.zeros);
    const Stages<T, L> stg{smem};
    constexpr int kXIters = TOK * 8 / kThreads, kBIters = line_iters<BITS, L::kLines, kThreads>();
    static_assert(TOK * 8 % kThreads == 0, "copy split must be exact");
    const T* x_src[kXIters];
    const int32_t* b_src[kBIters];
    int x_dst[kXIters], b_dst[kBIters];
    uint32_t x_ok = 0, b_ok = 0;
    tile_copies<false, L::kLines, kThreads, BITS>(args, tid, m0, n0, x_src, x_dst, x_ok, b_src, b_dst, b_ok);
    auto load_stage = [&](int s, int kt) {
        issue_copies<false, four_bit_iters<L::kLines, kThreads>()>(stg, s, kt, x_src, x_dst, x_ok, b_src, b_dst,
                                                                  b_ok);
        if (tid < kBN) copy_group_rows<kBN>(stg.s(s), stg.z(s), S, Z, tid, kt * kBK, n0, args);
    };

    // This thread's two channels (rows g and g + 8 of its warp's 16) and their words' places in a packed tile.
    constexpr int kSPW = BITS == 8 ? 1 : 2;  // k16 steps per word
    constexpr int kSteps = kBK / 16;
    int ch_local[2], w_line[2], w_chunk0[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        ch_local[h] = wg * 64 + wq * 16 + (lane >> 2) + 8 * h;
        w_line[h] = ch_local[h] / kI;
        w_chunk0[h] = (ch_local[h] % kI) * (4 / kSPW);
    }
    const auto zq_sym = zero_point<BITS, T>(BITS == 8 ? 128.f : 8.f);

    // Converts tile `kt` (in buffer s) into the A fragments of its 4 k16 steps.
    auto convert_tile = [&](int s, int kt, uint32_t (&af)[kSteps][4]) {
        const uint32_t* sb = stg.b(s);
        const uint16_t* ss = reinterpret_cast<const uint16_t*>(stg.s(s));
        const uint16_t* sz = reinterpret_cast<const uint16_t*>(stg.z(s));
        const int k0 = kt * kBK, g0 = k0 >> args.group_shift;
#pragma unroll
        for (int blk = 0; blk < kSteps / kSPW; ++blk) {
            const int r = ((k0 + blk * 16 * kSPW) >> args.group_shift) != g0;  // second group row (group 32)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint32_t w =
                    sb[w_line[h] * 32 + swz_b<BITS>(w_line[h], w_chunk0[h] + blk) * 4 + (lane & 3)];
                const uint32_t w2 = BITS != 6 ? 0 : fp6::as_half0(sb[L::kLines * 32 + w_line[h] * 16 +
                                                                     (w_chunk0[h] + blk) * 2 + ((lane >> 1) & 1)],
                                                                  lane & 1);
                const uint16_t sbits = ss[r * kBN + ch_local[h]];
                const uint16_t zbits = has_zeros ? sz[r * kBN + ch_local[h]] : 0;
                const auto zq = has_zeros ? zero_point<BITS, T>(float(*reinterpret_cast<const T*>(&zbits))) : zq_sym;
                word_to_a_frags<BITS, T>(w, zq, O::bcast(*reinterpret_cast<const T*>(&sbits)), blk, h, af, w2,
                                         args.group_shift != 31);
            }
        }
    };
    auto issue_tile = [&](int s, float (&acc)[TOK / 2], const uint32_t (&af)[kSteps][4]) {
        const uint64_t desc = swizzle128_desc(smem_addr(stg.x(s)));
        wgmma_fence();
#pragma unroll
        for (int st = 0; st < kSteps; ++st) wgmma_tok<TOK, T>(acc, af[st], desc + uint64_t(2 * st));
        wgmma_commit();
    };

    float acc[TOK / 2];
#pragma unroll
    for (int i = 0; i < TOK / 2; ++i) acc[i] = 0.f;
    uint32_t af0[kSteps][4], af1[kSteps][4];

#pragma unroll
    for (int s = 0; s < kDist; ++s) {
        if (kt_begin + s < kt_end) load_stage(s, kt_begin + s);
        cp_async_commit();
    }
    // One iteration per tile; unrolled by two so the fragment double buffer has compile-time indices.
    auto step = [&](int kt, uint32_t (&af)[kSteps][4]) {
        const int i = kt - kt_begin;
        cp_async_wait<kDist - 1>();  // tile kt landed (kDist + i groups committed)
        fence_proxy_async();         // make the generic-proxy (cp.async) writes visible to wgmma's async proxy
        __syncthreads();             // ... for all threads; and every warpgroup's wgmma of tile kt - 2 is done
        if (kt + kDist < kt_end) load_stage((i + kDist) % STAGES, kt + kDist);
        cp_async_commit();
        convert_tile(i % STAGES, kt, af);
        issue_tile(i % STAGES, acc, af);
        wgmma_wait<1>();  // the group of tile kt - 1 is done: its fragments and buffer may be reused
    };
    int kt = kt_begin;
    for (; kt + 1 < kt_end; kt += 2) {
        step(kt, af0);
        step(kt + 1, af1);
    }
    if (kt < kt_end) step(kt, af0);
    wgmma_wait<0>();
    cp_async_wait<0>();

    // Epilogue: acc[4j + e] is channel g (+8 for e >= 2) of this warp, token 8j + 2(t%4) + (e & 1).
    const T* bias = static_cast<const T*>(args.bias);
    visit_epilogue(args.ep, [&](auto kind) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + ch_local[h];
            if (n >= args.n) continue;
            const float bv = (bias != nullptr && args.partials == nullptr) ? float(bias[n]) : 0.f;
            const float f = channel_factor<BITS, T>(args, n);
#pragma unroll
            for (int j = 0; j < TOK / 8; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int m = m0 + 8 * j + 2 * (lane & 3) + e;
                    if (m >= args.m) continue;
                    const float v = scaled_sum<BITS>(acc[4 * j + 2 * h + e], f, bv);
                    if (args.partials == nullptr)
                        static_cast<T*>(args.c)[(size_t)m * args.n + n] =
                            T(apply_epilogue_kind<decltype(kind)::value>(v, args.ep));
                    else
                        args.partials[((size_t)blockIdx.z * args.m + m) * args.n + n] = v;
                }
            }
        }
    });
#else
    __trap();  // built without sm_90a: the host never selects this kernel on such a build (see gemm.cu)
#endif
}

}  // namespace gemm
}  // namespace trt_woq
