/*
 * The conv family's batched 2-D transpose: [batch, rows, cols] -> [batch, cols, rows] through a 32 x 33 shared tile
 * (grid: cols / 32, rows / 32, batch; block 32 x 8). conv_im2col turns its GEMM rows into the NCHW output with it
 * (rows = pixels, cols = channels); conv_implicit_cl turns an NCHW activation into channels-last (rows = channels,
 * cols = pixels). conv_wgmma also has it zero its stream-K counters (`clear`, `n_clear`) and launches its kernel as a
 * programmatic dependent of it (pdl.cuh): the kernel's launch and prologue overlap the transpose.
 */
#ifndef TRT_WOQ_CONV_TRANSPOSE_CUH
#define TRT_WOQ_CONV_TRANSPOSE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "candidates.h"
#include "pdl.cuh"

namespace trt_woq {
namespace conv {

template <typename T>
__global__ void transpose_kernel(const T* __restrict__ src, T* __restrict__ dst, int rows, int cols,
                                 unsigned int* clear, int n_clear) {
    pdl_launch_dependents_clearing(clear, n_clear);
    __shared__ T tile[32][33];
    const int b = blockIdx.z;
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    const T* s = src + int64_t(b) * rows * cols;
    T* d = dst + int64_t(b) * cols * rows;
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int row = r0 + r, col = c0 + threadIdx.x;
        if (row < rows && col < cols) tile[r][threadIdx.x] = s[int64_t(row) * cols + col];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += blockDim.y) {
        const int col = c0 + r, row = r0 + threadIdx.x;
        if (row < rows && col < cols) d[int64_t(col) * rows + row] = tile[threadIdx.x][r];
    }
}

template <typename T>
trt_woq_status transpose(const T* src, T* dst, int batch, int rows, int cols, cudaStream_t stream,
                         unsigned int* clear = nullptr, int n_clear = 0) {
    const dim3 grid((cols + 31) / 32, (rows + 31) / 32, batch);
    transpose_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(src, dst, rows, cols, clear, n_clear);
    return check_launch();
}

}  // namespace conv
}  // namespace trt_woq

#endif /* TRT_WOQ_CONV_TRANSPOSE_CUH */
