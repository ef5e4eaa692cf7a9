/*
 * TEST-ONLY entry of the test library (trt_woq_kernels_testing), not in the shipped libtrt_woq_kernels.so: runs the
 * converters of converters.cuh on an array of words so tests can compare every INT8 / INT4 value in every position
 * against a table built on the host.
 */
#include <cuda_runtime.h>

#include "candidates.h"
#include "converters.cuh"

namespace trt_woq {
namespace {

template <typename T, int BITS>
__global__ void convert_kernel(const uint32_t* words, T* out, int64_t n_words) {
    using P = typename Pair<T>::type;
    constexpr int kPairs = 16 / BITS;
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= n_words) return;
    P p[kPairs];
    convert_word<T, BITS>(words[i], p);
    P* o = reinterpret_cast<P*>(out) + i * kPairs;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) o[j] = p[j];
}

template <typename T, int BITS>
trt_woq_status launch(const void* words, void* out, int64_t n_words, cudaStream_t stream) {
    const int threads = 256;
    const int64_t blocks = (n_words + threads - 1) / threads;
    convert_kernel<T, BITS><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        static_cast<const uint32_t*>(words), static_cast<T*>(out), n_words);
    return check_launch();
}

}  // namespace
}  // namespace trt_woq

/* out receives n_words * (32 / bits) values of the activation type, element order e0, e1, ... per word. */
extern "C" __attribute__((visibility("default"))) trt_woq_status trt_woq_testing_convert(
    int32_t bits, int32_t act_type, const void* words, void* out, int64_t n_words, void* stream) {
    if (words == nullptr || out == nullptr || n_words < 0) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (n_words == 0) return TRT_WOQ_OK;
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const bool bf16 = act_type == TRT_WOQ_ACT_BF16;
    if (act_type != TRT_WOQ_ACT_FP16 && !bf16) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (bits == 8) {
        return bf16 ? trt_woq::launch<__nv_bfloat16, 8>(words, out, n_words, s) : trt_woq::launch<half, 8>(words, out, n_words, s);
    }
    if (bits == 4) {
        return bf16 ? trt_woq::launch<__nv_bfloat16, 4>(words, out, n_words, s) : trt_woq::launch<half, 4>(words, out, n_words, s);
    }
    return TRT_WOQ_ERR_INVALID_ARGUMENT;
}
