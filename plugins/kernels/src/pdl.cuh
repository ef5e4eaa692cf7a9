/*
 * Programmatic dependent launch (sm_90+): a kernel launched with `launch_ex(..., programmatic = true, ...)`
 * (candidates.h) may start once every CTA of the kernel ahead of it on the stream called pdl_launch_dependents(); it
 * calls pdl_wait() before it reads that kernel's results. Both are no-ops in a grid launched without the attribute.
 */
#ifndef TRT_WOQ_PDL_CUH
#define TRT_WOQ_PDL_CUH

#include <stdint.h>

namespace trt_woq {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* In a kernel whose programmatic dependent counts on zeroed counters: lets that dependent start, and zeroes the n
 * counters with every thread of the grid (the dependent's first counter access follows its pdl_wait). */
__device__ __forceinline__ void pdl_launch_dependents_clearing(unsigned int* counters, int n) {
    pdl_launch_dependents();
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const int64_t stride = int64_t(threads) * gridDim.x * gridDim.y * gridDim.z;
    const int64_t block = blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
    for (int64_t i = block * threads + (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        counters[i] = 0;
}

}  // namespace trt_woq

#endif /* TRT_WOQ_PDL_CUH */
