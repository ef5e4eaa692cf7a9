/*
 * Programmatic dependent launch (sm_90+): a kernel launched with `launch_ex(..., programmatic = true, ...)`
 * (candidates.h) may start once every CTA of the kernel ahead of it on the stream called pdl_launch_dependents(); it
 * calls pdl_wait() before it reads that kernel's results. Both are no-ops in a grid launched without the attribute.
 */
#ifndef TRT_WOQ_PDL_CUH
#define TRT_WOQ_PDL_CUH

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

}  // namespace trt_woq

#endif /* TRT_WOQ_PDL_CUH */
