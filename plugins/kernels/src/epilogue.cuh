/*
 * The fused activation of every store path (GEMV, the GEMM's kernels and its split-K reduce): applied in FP32 to
 * X @ W + bias, before the one rounding to the output type. One switch on trt_woq_epilogue, uniform across a launch
 * (no divergence); the formulas are the float64 references of graph_passes/registry/epilogues.py in FP32.
 */
#ifndef TRT_WOQ_EPILOGUE_CUH
#define TRT_WOQ_EPILOGUE_CUH

#include <type_traits>

#include "trt_woq/kernels.h"

namespace trt_woq {

struct Epilogue {
    int kind = TRT_WOQ_EPILOGUE_NONE;  // trt_woq_epilogue
    float clip_min = 0.f;
    float clip_max = 0.f;
};

inline Epilogue epilogue_of(const trt_woq_linear_params& p) {
    Epilogue e;
    e.kind = p.epilogue;
    e.clip_min = p.clip_min;
    e.clip_max = p.clip_max;
    return e;
}

// The activation of one kind, chosen at compile time.
template <int KIND>
__device__ __forceinline__ float apply_epilogue_kind(float v, const Epilogue& e) {
    if constexpr (KIND == TRT_WOQ_EPILOGUE_RELU) return fmaxf(v, 0.f);
    if constexpr (KIND == TRT_WOQ_EPILOGUE_CLIP) return fminf(fmaxf(v, e.clip_min), e.clip_max);
    // SiLU on the fast exponential and division (ex2.approx, rcp.approx: a few 1e-7 relative, far below the output's
    // rounding) where expf and an IEEE division took 5-18 % of a conv's time; -v large: __expf = inf, v * 0 = -0.
    if constexpr (KIND == TRT_WOQ_EPILOGUE_SILU) return __fdividef(v, 1.f + __expf(-v));
    if constexpr (KIND == TRT_WOQ_EPILOGUE_GELU_ERF) return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    if constexpr (KIND == TRT_WOQ_EPILOGUE_GELU_TANH)
        return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
    return v;
}

// Calls f(std::integral_constant<int, kind>{}) for e's kind. A store path unrolled over many outputs takes its
// activation this way, once outside the unrolled code: a switch per output inlines every activation at every output,
// code that overflows the instruction cache.
template <typename F>
__device__ __forceinline__ void visit_epilogue(const Epilogue& e, F&& f) {
    switch (e.kind) {
        case TRT_WOQ_EPILOGUE_RELU: f(std::integral_constant<int, TRT_WOQ_EPILOGUE_RELU>{}); break;
        case TRT_WOQ_EPILOGUE_CLIP: f(std::integral_constant<int, TRT_WOQ_EPILOGUE_CLIP>{}); break;
        case TRT_WOQ_EPILOGUE_SILU: f(std::integral_constant<int, TRT_WOQ_EPILOGUE_SILU>{}); break;
        case TRT_WOQ_EPILOGUE_GELU_ERF: f(std::integral_constant<int, TRT_WOQ_EPILOGUE_GELU_ERF>{}); break;
        case TRT_WOQ_EPILOGUE_GELU_TANH: f(std::integral_constant<int, TRT_WOQ_EPILOGUE_GELU_TANH>{}); break;
        default: f(std::integral_constant<int, TRT_WOQ_EPILOGUE_NONE>{});
    }
}

__device__ __forceinline__ float apply_epilogue(float v, const Epilogue& e) {
    float y = v;
    visit_epilogue(e, [&](auto kind) { y = apply_epilogue_kind<decltype(kind)::value>(v, e); });
    return y;
}

}  // namespace trt_woq

#endif /* TRT_WOQ_EPILOGUE_CUH */
