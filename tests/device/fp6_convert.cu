/*
 * TEST-ONLY library for tests/device/fp6_check.py: runs trt_woq::fp6::convert_fp6_word on arrays of packed words so
 * the test can compare every FP6 code in every position with the float64 decode of the numpy packer's input.
 * Built by the test itself (nvcc -shared); never part of the shipped libraries.
 */
#include <cuda_runtime.h>

#include "converters_fp6.cuh"

namespace {

/* Thread i converts 4-bit word seg4[i] with 2-bit word seg2[i / 2] as half i % 2: 8 values, element order. */
template <typename T>
__global__ void convert_kernel(const uint32_t* seg4, const uint32_t* seg2, T* out, long long n_words) {
    using P = typename trt_woq::Pair<T>::type;
    const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
    if (i >= n_words) return;
    P p[4];
    if (i % 2 == 0) {
        trt_woq::fp6::convert_fp6_word<T, 0>(seg4[i], seg2[i / 2], p);
    } else {
        trt_woq::fp6::convert_fp6_word<T, 1>(seg4[i], seg2[i / 2], p);
    }
    P* o = reinterpret_cast<P*>(out) + i * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = p[j];
}

}  // namespace

/* bf16 = 0: FP16 output, 1: BF16. Returns the cudaError_t of the launch and synchronisation. */
extern "C" int fp6_convert(int bf16, const void* seg4, const void* seg2, void* out, long long n_words) {
    const int threads = 256;
    const unsigned blocks = static_cast<unsigned>((n_words + threads - 1) / threads);
    const auto* s4 = static_cast<const uint32_t*>(seg4);
    const auto* s2 = static_cast<const uint32_t*>(seg2);
    if (bf16) {
        convert_kernel<__nv_bfloat16><<<blocks, threads>>>(s4, s2, static_cast<__nv_bfloat16*>(out), n_words);
    } else {
        convert_kernel<half><<<blocks, threads>>>(s4, s2, static_cast<half*>(out), n_words);
    }
    const cudaError_t err = cudaGetLastError();
    return err != cudaSuccess ? static_cast<int>(err) : static_cast<int>(cudaDeviceSynchronize());
}
