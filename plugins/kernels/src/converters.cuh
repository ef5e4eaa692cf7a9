/*
 * Fast dequantizing converters for layout v1 words (docs/layouts.md, step 3).
 *
 * One 32-bit packed word in, its E = 32 / bits elements out as E / 2 pairs of the activation type, in element order
 * (e0, e1), (e2, e3), ...  Each output value is the SIGNED q = U - 2^(bits-1) (U - 8 for INT4, U - 128 for INT8),
 * exact in both FP16 and BF16. Zero points and scales are the caller's business:
 *     symmetric:   w = q * s
 *     asymmetric:  w = (q - (z - 2^(bits-1))) * s        (the subtraction is exact: small integers)
 *
 * Where the layout puts the elements (why these converters de-interleave for free):
 *   INT8: byte p of the word is e_p.
 *   INT4: nibble p (bits 4p..4p+3) is e_order4[p], order4 = [0 2 4 6 1 3 5 7]; so nibbles 0 and 4 are (e0, e1),
 *         nibbles 1 and 5 are (e2, e3), 2 and 6 are (e4, e5), 3 and 7 are (e6, e7): each pair sits in the two 16-bit
 *         halves of the word at the same bit offset, and one mask pulls a pair straight into a half2's halves.
 *
 * The tricks ("magic numbers"): OR a small unsigned integer u into the low mantissa bits of a float whose exponent
 * makes the mantissa's unit step 1 (or 16), and the float's value is base + u (or base + 16 u), exactly:
 *   FP16 0x6400 = 1024.0 (ulp 1 on [1024, 2048)); FP32 0x4B000000 = 8388608.0 (ulp 1 on [2^23, 2^24));
 *   BF16 0x4300 = 128.0 (ulp 1 on [128, 256), 7 mantissa bits, so only a 4-bit field fits at bit 0).
 * Then one subtraction of (base + 2^(bits-1)) gives q.
 *
 *   INT8 -> FP16: PRMT(word, 0x64646464, 0x7150) = halves (0x64e0, 0x64e1) = 1024 + U; selector 0x7352 gives (e2, e3);
 *                 one HSUB2 of 1152 (1024 + 128) per pair.                                       4 instructions / word
 *   INT8 -> BF16: PRMT each byte into the FP32 0x4B000000 base (8388608 + U), FADD -8388736 (8388608 + 128) in FP32,
 *                 keep the high halves of two FP32 with PRMT(f0, f1, 0x7632): exact, |q| <= 128 fits BF16.
 *                                                                                               10 instructions / word
 *   INT4 -> FP16: LOP3 (w & 0x000F000F) | 0x64006400 = (1024 + U0, 1024 + U4) -> HSUB2 1032 -> (e0, e1);
 *                 LOP3 (w & 0x00F000F0) | 0x64006400 = (1024 + 16 U1, ..) -> HFMA2 x 1/16 - 72 -> (e2, e3)
 *                 (1024 + 16 U) / 16 = 64 + U, minus 64 + 8); the same on w >> 8 gives (e4, e5), (e6, e7).
 *                                                                                                9 instructions / word
 *   INT4 -> BF16: LOP3 ((w >> 4i) & 0x000F000F) | 0x43004300 = (128 + U, 128 + U') -> subtract 136 for i = 0..3.
 *                 Unlike FP16, the high-nibble mask 0x00F000F0 cannot be used with the BF16 base: 16 U would reach
 *                 the exponent field (bit 7), so each pair takes its own shift.                  11 instructions / word
 *
 * Self-contained: needs only <cuda_fp16.h>, <cuda_bf16.h>, <stdint.h>. Device code for SM80 and newer (BF16 math);
 * PRMT and LOP3 are written as inline PTX so the compiler cannot reorder them into something slower.
 *
 * Usage (a GEMM fragment, say):
 *     trt_woq::Pair<half>::type q[4];                      // half2 x 4 for one INT4 word
 *     trt_woq::convert_word<half, 4>(word, q);             // q[0] = (e0, e1) ... q[3] = (e6, e7)
 */
#ifndef TRT_WOQ_CONVERTERS_CUH
#define TRT_WOQ_CONVERTERS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

namespace trt_woq {

/* The pair type of an activation type: half -> half2, __nv_bfloat16 -> __nv_bfloat162. */
template <typename T>
struct Pair;
template <>
struct Pair<half> {
    using type = half2;
};
template <>
struct Pair<__nv_bfloat16> {
    using type = __nv_bfloat162;
};

namespace detail {

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

/* (a & mask) | bits in one LOP3; immLut 0xEA = (A & B) | C. */
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t bits) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));
    return d;
}

template <typename P>
__device__ __forceinline__ P as_pair(uint32_t u) {
    P p;
    *reinterpret_cast<uint32_t*>(&p) = u;
    return p;
}

template <typename P>
__device__ __forceinline__ uint32_t as_u32(P p) {
    return *reinterpret_cast<uint32_t*>(&p);
}

}  // namespace detail

// mma.sync.m16n8k16 with FP32 accumulators (d += A B) for T = half or __nv_bfloat16: the one instruction the GEMV
// and the mma.sync GEMM feed with these converters' output.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<T, half>::value)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Converts one layout-v1 word of `bits` (4 or 8) into 32 / bits / 2 pairs of T holding q = U - 2^(bits-1). */
template <typename T, int bits>
__device__ __forceinline__ void convert_word(uint32_t word, typename Pair<T>::type* out);

/* INT8 -> FP16. */
template <>
__device__ __forceinline__ void convert_word<half, 8>(uint32_t word, half2* out) {
    const half2 bias = detail::as_pair<half2>(0x64806480u);  // 1024 + 128 = 1152
    out[0] = __hsub2(detail::as_pair<half2>(detail::prmt(word, 0x64646464u, 0x7150u)), bias);
    out[1] = __hsub2(detail::as_pair<half2>(detail::prmt(word, 0x64646464u, 0x7352u)), bias);
}

/* INT8 -> BF16. */
template <>
__device__ __forceinline__ void convert_word<__nv_bfloat16, 8>(uint32_t word, __nv_bfloat162* out) {
    // Byte p into the low byte of an FP32 0x4B000000 (selector digit 4 takes byte 0 of the second operand = 0x00,
    // digit 7 its byte 3 = 0x4B).
    const uint32_t base = 0x4B000000u;
    float f[4];
    f[0] = __uint_as_float(detail::prmt(word, base, 0x7440u));  // 0x4B0000e0
    f[1] = __uint_as_float(detail::prmt(word, base, 0x7441u));
    f[2] = __uint_as_float(detail::prmt(word, base, 0x7442u));
    f[3] = __uint_as_float(detail::prmt(word, base, 0x7443u));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[i] -= 8388736.0f;  // 8388608 + 128; exact, leaves a small integer whose low 16 bits are zero
    }
    // High halves of (f0, f1) -> (e0, e1): bytes 2,3 of the first operand then bytes 6,7 (= 2,3 of the second).
    out[0] = detail::as_pair<__nv_bfloat162>(detail::prmt(__float_as_uint(f[0]), __float_as_uint(f[1]), 0x7632u));
    out[1] = detail::as_pair<__nv_bfloat162>(detail::prmt(__float_as_uint(f[2]), __float_as_uint(f[3]), 0x7632u));
}

/* INT4 -> FP16. */
template <>
__device__ __forceinline__ void convert_word<half, 4>(uint32_t word, half2* out) {
    const uint32_t magic = 0x64006400u;                       // (1024, 1024)
    const half2 lo_bias = detail::as_pair<half2>(0x64086408u); // 1024 + 8 = 1032
    const half2 hi_mul = detail::as_pair<half2>(0x2C002C00u);  // 1/16
    const half2 hi_add = detail::as_pair<half2>(0xD480D480u);  // -72 = -(64 + 8)
    const uint32_t upper = word >> 8;
    out[0] = __hsub2(detail::as_pair<half2>(detail::and_or(word, 0x000F000Fu, magic)), lo_bias);
    out[1] = __hfma2(detail::as_pair<half2>(detail::and_or(word, 0x00F000F0u, magic)), hi_mul, hi_add);
    out[2] = __hsub2(detail::as_pair<half2>(detail::and_or(upper, 0x000F000Fu, magic)), lo_bias);
    out[3] = __hfma2(detail::as_pair<half2>(detail::and_or(upper, 0x00F000F0u, magic)), hi_mul, hi_add);
}

/* INT4 -> BF16. */
template <>
__device__ __forceinline__ void convert_word<__nv_bfloat16, 4>(uint32_t word, __nv_bfloat162* out) {
    const uint32_t magic = 0x43004300u;                                        // (128, 128)
    const __nv_bfloat162 bias = detail::as_pair<__nv_bfloat162>(0x43084308u);  // 128 + 8 = 136
    out[0] = __hsub2(detail::as_pair<__nv_bfloat162>(detail::and_or(word, 0x000F000Fu, magic)), bias);
    out[1] = __hsub2(detail::as_pair<__nv_bfloat162>(detail::and_or(word >> 4, 0x000F000Fu, magic)), bias);
    out[2] = __hsub2(detail::as_pair<__nv_bfloat162>(detail::and_or(word >> 8, 0x000F000Fu, magic)), bias);
    out[3] = __hsub2(detail::as_pair<__nv_bfloat162>(detail::and_or(word >> 12, 0x000F000Fu, magic)), bias);
}

}  // namespace trt_woq

#endif /* TRT_WOQ_CONVERTERS_CUH */
