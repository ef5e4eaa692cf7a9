/*
 * Bit-parallel converters for layout 2, fp6_split_v1 (docs/layouts.md): FP6 E3M2 -> FP16 / BF16 pairs, no lookup table.
 *
 * Input: one 4-bit segment word `seg4` (8 weights e0..e7 of layout 1's INT4 word: nibble p holds code bits 3..0,
 * `e1 e0 m1 m0`, of element order4[p], order4 = [0 2 4 6 1 3 5 7]) and the 2-bit segment word `seg2` that serves it
 * as half H (0 or 1) of the pair of 4-bit words it covers (code bits 5..4, `s e2`, at the positions the layout gives).
 * Output: (e0, e1), (e2, e3), (e4, e5), (e6, e7) as pairs of T holding value * 2^-12.
 *
 * Why 2^-12: the FP16 built here has the FP6 exponent field as its own (bits 12..10 = e2 e1 e0, bits 14..13 zero) and
 * the two mantissa bits at the top of its mantissa (9..8), sign at 15. An FP16 with exponent field E and mantissa m
 * is 2^(E-15) (1 + m) (normal) or 2^-14 m (E = 0, subnormal); the FP6 is 2^(E-3) (1 + m) or 2^-2 m: the ratio is
 * 2^(15-3) in both cases, so FP6 subnormals come out right with no special case. The factor 2^12 is NOT applied
 * here: the kernels fold it into the scale when they load it (kBiasScale, FP32), so it costs nothing per weight.
 * (It is not folded into the stored scales: scale * 2^12 would overflow FP16 for weights above 448 in magnitude.)
 *
 * Pair i: nibbles i and i + 4 sit at bits 4i and 16 + 4i of seg4, so one shift puts both at bits 8..11 and 24..27;
 * the layout placed the `s e2` bits of pair i of half H so that a left rotation by r = 6 (4H + i) mod 32 puts them
 * at bits 15, 12 and 31, 28. Then (shifted seg4 & 0x0F000F00) | (rotated seg2 & 0x90009000) is the FP16 pair:
 * 4 instructions per pair (SHF, SHF.W, LOP3, LOP3), fewer where a shift is 0.
 *
 * BF16: the same FP16 pair, widened to FP32 and narrowed to BF16: exact (3 significant bits, exponent >= -16 after
 * the 2^-12, in range for BF16), 3 more instructions per pair. Building BF16 bits directly would need a different
 * 2-bit arrangement (the sign sits 6 bits above e2 in BF16, 3 in FP16) and BF16 values near 2^-124, whose products
 * with small activations leave the FP32 accumulator's normal range.
 */
#ifndef TRT_WOQ_CONVERTERS_FP6_CUH
#define TRT_WOQ_CONVERTERS_FP6_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "converters.cuh"

namespace trt_woq {
namespace fp6 {

/* 2^(15 - 3): what the kernels multiply each FP32 scale by. */
constexpr float kBiasScale = 4096.0f;

/* Left rotation of the 2-bit word for pair slot j = 4 H + i (docs/layouts.md, layout 2). */
__host__ __device__ constexpr int rotation(int slot) {
    return (6 * slot) % 32;
}

template <int R>
__device__ __forceinline__ uint32_t rotl(uint32_t x) {
    if constexpr (R == 0) {
        return x;
    } else {
        return __funnelshift_l(x, x, R);
    }
}

/* Shift of seg4 for pair i: nibble i (bits 4i..4i+3) to bits 8..11. */
template <int I>
__device__ __forceinline__ uint32_t nibble_pair(uint32_t seg4) {
    if constexpr (I < 2) {
        return seg4 << (8 - 4 * I);
    } else {
        return seg4 >> (4 * I - 8);
    }
}

template <int H, int I>
__device__ __forceinline__ half2 pair_f16(uint32_t seg4, uint32_t seg2) {
    const uint32_t sign_e2 = rotl<rotation(4 * H + I)>(seg2) & 0x90009000u;
    return detail::as_pair<half2>(detail::and_or(nibble_pair<I>(seg4), 0x0F000F00u, sign_e2));
}

/* (2^12, 2^12) as a pair of T: what restores the converted pairs to the FP6 values (exact). */
template <typename T>
__device__ __forceinline__ typename Pair<T>::type bias_pair() {
    return detail::as_pair<typename Pair<T>::type>(std::is_same<T, half>::value ? 0x6C006C00u : 0x45804580u);
}

/* The 2-bit word of half `h` (0 or 1, a runtime value such as lane & 1) as half 0 sees its bits: half 1's rotations
 * are half 0's plus 24 (6 x 4 mod 32), so one rotation by 24 h lets every lane run convert_fp6_word<T, 0>, where a
 * branch on h would split the warp. */
__device__ __forceinline__ uint32_t as_half0(uint32_t seg2, int h) {
    return __funnelshift_l(seg2, seg2, 24 * h);
}

/* One 4-bit word and its 2-bit word (half H) -> 4 pairs of T holding value * 2^-12. */
template <typename T, int H>
__device__ __forceinline__ void convert_fp6_word(uint32_t seg4, uint32_t seg2, typename Pair<T>::type* out) {
    const half2 p[4] = {pair_f16<H, 0>(seg4, seg2), pair_f16<H, 1>(seg4, seg2), pair_f16<H, 2>(seg4, seg2),
                        pair_f16<H, 3>(seg4, seg2)};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (std::is_same<T, half>::value) {
            out[i] = p[i];
        } else {
            out[i] = __float22bfloat162_rn(__half22float2(p[i]));
        }
    }
}

}  // namespace fp6
}  // namespace trt_woq

#endif /* TRT_WOQ_CONVERTERS_FP6_CUH */
