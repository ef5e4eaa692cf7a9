/*
 * The candidate registry's internal interface. A kernel family (the GEMV here, a GEMM elsewhere) defines an array of
 * Candidate entries and its length in its own translation unit; registry.cu lists the families once, in a fixed order,
 * so candidate ids (positions in the concatenation) are stable for one build; tactics come from the names.
 *
 * Adding a family: define `extern const trt_woq::Candidate kFooCandidates[]; extern const int kFooCandidateCount;`
 * in your .cu (declare them below) and add one line `{kFooCandidates, &kFooCandidateCount}` to kFamilies in
 * registry.cu.
 * Adding a weight format, activation mode, op or epilogue to a candidate: its Serves masks say so, and its
 * supports() / launch() handle it; registry.cu never hands a candidate a problem outside its masks.
 */
#ifndef TRT_WOQ_CANDIDATES_H
#define TRT_WOQ_CANDIDATES_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "trt_woq/kernels.h"

namespace trt_woq {

constexpr uint32_t bit(int enum_value) { return enum_value >= 0 && enum_value < 32 ? 1u << enum_value : 0u; }

/* What a candidate serves: masks of bit(enum value), as trt_woq_candidate_info reports them. */
struct Serves {
    uint32_t weight_formats;
    uint32_t act_modes;
    uint32_t ops;
    uint32_t epilogues;
};

/* Every epilogue: each store path applies it through epilogue.cuh. */
constexpr uint32_t kAllEpilogues = bit(TRT_WOQ_EPILOGUE_NONE) | bit(TRT_WOQ_EPILOGUE_RELU) |
                                   bit(TRT_WOQ_EPILOGUE_CLIP) | bit(TRT_WOQ_EPILOGUE_SILU) |
                                   bit(TRT_WOQ_EPILOGUE_GELU_ERF) | bit(TRT_WOQ_EPILOGUE_GELU_TANH);

/* The integer weight-only linear kernels (GEMV, GEMM) with any fused activation. */
constexpr Serves kIntWeightOnlyLinear = {bit(TRT_WOQ_WEIGHT_INT8) | bit(TRT_WOQ_WEIGHT_INT4),
                                         bit(TRT_WOQ_ACT_MODE_WEIGHT_ONLY), bit(TRT_WOQ_OP_LINEAR), kAllEpilogues};

/* The same with FP6 E3M2 (layout 2): the GEMV and GEMM families. */
constexpr Serves kWeightOnlyLinear = {kIntWeightOnlyLinear.weight_formats | bit(TRT_WOQ_WEIGHT_FP6_E3M2),
                                      kIntWeightOnlyLinear.act_modes, kIntWeightOnlyLinear.ops,
                                      kIntWeightOnlyLinear.epilogues};

/* The conv2d candidates (src/conv/): the same formats and epilogues. */
constexpr Serves kIntWeightOnlyConv = {bit(TRT_WOQ_WEIGHT_INT8) | bit(TRT_WOQ_WEIGHT_INT4),
                                       bit(TRT_WOQ_ACT_MODE_WEIGHT_ONLY), bit(TRT_WOQ_OP_CONV2D), kAllEpilogues};

/* Bits per weight of the integer formats (what the INT kernels are templated on). */
constexpr int int_bits(trt_woq_weight_format f) { return f == TRT_WOQ_WEIGHT_INT8 ? 8 : 4; }

struct Candidate {
    const char* name;  // short and unique, e.g. "gemv_mma_nt4"; its hash is the TensorRT tactic (kernels.h), so a
                       // name stays with one kernel
    Serves serves;
    /* TRT_WOQ_OK when this candidate can run the sizes and options of `p` on compute capability `sm` (e.g. 90).
     * Called only after the common checks of check_common() passed and when `serves` covers `p`; reads no pointers. */
    trt_woq_status (*supports)(const trt_woq_linear_params* p, int32_t sm);
    /* Workspace bytes for `p` (0 for none). */
    size_t (*workspace)(const trt_woq_linear_params* p, int32_t sm);
    /* Enqueue on `stream`; pointers are checked by the caller, shapes by supports(). */
    trt_woq_status (*launch)(const trt_woq_linear_params* p, cudaStream_t stream);
    /* The dispatch's preference for `p` on `sm`: among supported candidates, the highest score wins (ties: lowest id);
     * a negative score means "never pick automatically" (still usable by id, e.g. as a TensorRT tactic). */
    int32_t (*score)(const trt_woq_linear_params* p, int32_t sm);
};

/* Families. */
extern const Candidate kGemvCandidates[];
extern const int kGemvCandidateCount;
extern const Candidate kGemmCandidates[];  // src/gemm/gemm_candidates.cu (M > 16)
extern const int kGemmCandidateCount;
extern const Candidate kConvCandidates[];  // src/conv/conv.cu (op CONV2D)
extern const int kConvCandidateCount;
extern const Candidate kW8A8Candidates[];  // src/w8a8/w8a8.cu (act_mode W8A8_DYNAMIC)
extern const int kW8A8CandidateCount;

/* Records a failed CUDA call for trt_woq_last_cuda_error() and returns TRT_WOQ_ERR_CUDA. */
trt_woq_status record_cuda_error(cudaError_t err);

/* Launch-time check: TRT_WOQ_OK, or the status of the last launch error (recorded). */
trt_woq_status check_launch();

/* The launch configuration of `grid` in clusters of `cluster` CTAs along x (no cluster attribute for 1); `attr` holds
 * the attribute the configuration points to. */
inline cudaLaunchConfig_t cluster_config(dim3 grid, dim3 block, size_t smem, unsigned cluster, cudaStream_t stream,
                                         cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = cluster > 1 ? 1 : 0;
    return config;
}

/* Launches `kernel` in clusters of `cluster` CTAs along x (no cluster attribute for 1) and checks the launch. With
 * `programmatic`, a programmatic dependent launch (cudaLaunchAttributeProgrammaticStreamSerialization): the kernel may
 * start once every CTA of the kernel ahead of it on the stream ran `griddepcontrol.launch_dependents`, and reads that
 * kernel's results only after `griddepcontrol.wait`. */
template <typename... Params, typename... Args>
trt_woq_status launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                         bool programmatic, cudaStream_t stream, const Args&... args) {
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t config = cluster_config(grid, block, smem, cluster, stream, attrs);
    if (programmatic) {
        attrs[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
        ++config.numAttrs;
    }
    const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
    return err == cudaSuccess ? check_launch() : record_cuda_error(err);
}

template <typename... Params, typename... Args>
trt_woq_status launch_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                                  cudaStream_t stream, const Args&... args) {
    return launch_ex(kernel, grid, block, smem, cluster, false, stream, args...);
}

}  // namespace trt_woq

#endif /* TRT_WOQ_CANDIDATES_H */
