/*
 * The fused activation of every store path (GEMV, the GEMM's kernels and its split-K reduce): applied in FP32 to
 * X @ W + bias, before the one rounding to the output type. One switch on trt_woq_epilogue, uniform across a launch
 * (no divergence); the formulas are the float64 references of graph_passes/registry/epilogues.py in FP32.
 */
#ifndef TRT_WOQ_EPILOGUE_CUH
#define TRT_WOQ_EPILOGUE_CUH

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

__device__ __forceinline__ float apply_epilogue(float v, const Epilogue& e) {
    switch (e.kind) {
        case TRT_WOQ_EPILOGUE_RELU: return fmaxf(v, 0.f);
        case TRT_WOQ_EPILOGUE_CLIP: return fminf(fmaxf(v, e.clip_min), e.clip_max);
        case TRT_WOQ_EPILOGUE_SILU: return v / (1.f + expf(-v));  // -v large: v / inf = -0
        case TRT_WOQ_EPILOGUE_GELU_ERF: return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
        case TRT_WOQ_EPILOGUE_GELU_TANH:
            return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        default: return v;
    }
}

}  // namespace trt_woq

#endif /* TRT_WOQ_EPILOGUE_CUH */
