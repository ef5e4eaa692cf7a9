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
// wgmma.mma_async m64nNk16 with FP32 accumulators, A from registers, B from shared memory (descriptor), for N = 64,
// 128, 256 tokens and FP16 / BF16 operands.
#define TRT_WOQ_WGMMA_M64N64K16(TYPE) \
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n" \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
__device__ __forceinline__ void wgmma_m64n64k16_f16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    TRT_WOQ_WGMMA_M64N64K16("f16");
}
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    TRT_WOQ_WGMMA_M64N64K16("bf16");
}
#undef TRT_WOQ_WGMMA_M64N64K16
#define TRT_WOQ_WGMMA_M64N128K16(TYPE) \
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
__device__ __forceinline__ void wgmma_m64n128k16_f16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    TRT_WOQ_WGMMA_M64N128K16("f16");
}
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    TRT_WOQ_WGMMA_M64N128K16("bf16");
}
#undef TRT_WOQ_WGMMA_M64N128K16
#define TRT_WOQ_WGMMA_M64N256K16(TYPE) \
    asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\n" \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
                 "{%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
__device__ __forceinline__ void wgmma_m64n256k16_f16(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
    TRT_WOQ_WGMMA_M64N256K16("f16");
}
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
    TRT_WOQ_WGMMA_M64N256K16("bf16");
}
#undef TRT_WOQ_WGMMA_M64N256K16

template <int TOK, typename T>
__device__ __forceinline__ void wgmma_tok(float (&d)[TOK / 2], const uint32_t (&a)[4], uint64_t desc) {
    constexpr bool kHalf = std::is_same<T, half>::value;
    if constexpr (TOK == 64 && kHalf) wgmma_m64n64k16_f16(d, a, desc);
    if constexpr (TOK == 64 && !kHalf) wgmma_m64n64k16_bf16(d, a, desc);
    if constexpr (TOK == 128 && kHalf) wgmma_m64n128k16_f16(d, a, desc);
    if constexpr (TOK == 128 && !kHalf) wgmma_m64n128k16_bf16(d, a, desc);
    if constexpr (TOK == 256 && kHalf) wgmma_m64n256k16_f16(d, a, desc);
    if constexpr (TOK == 256 && !kHalf) wgmma_m64n256k16_bf16(d, a, desc);
}
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
                    static_cast<T*>(args.c)[(size_t)m * args.n + n] = T(apply_epilogue(v, args.ep));
                else
                    args.partials[((size_t)blockIdx.z * args.m + m) * args.n + n] = v;
            }
        }
    }
#else
    __trap();  // built without sm_90a: the host never selects this kernel on such a build (see gemm.cu)
#endif
}

}  // namespace gemm
}  // namespace trt_woq
