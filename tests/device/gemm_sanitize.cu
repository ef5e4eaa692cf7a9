// Runs every GEMM candidate on a few small odd problems, with buffers of exactly the problem's size, so that
// `compute-sanitizer --tool memcheck` catches any out-of-bounds access and `--tool racecheck` any shared-memory race
// in the pipeline. Numerics are checked by gemm_check.py; this only checks statuses and memory safety.
//   nvcc -std=c++17 -Iplugins/kernels/include -Iplugins/kernels/src/gemm tests/device/gemm_sanitize.cu \
//        plugins/kernels/src/gemm/gemm.cu -o gemm_sanitize && compute-sanitizer ./gemm_sanitize
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gemm.h"

#define CUDA_OK(x)                                                                        \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorName(e_), __FILE__, __LINE__); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

struct Case {
    int m, n, k, bits, group, bf16, zeros, bias;
};

static void* dalloc(size_t bytes, unsigned seed) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    std::vector<unsigned char> h(bytes);
    for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<unsigned char>((i * 2654435761u + seed) >> 13) & 0x3F;
    cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice);  // small finite halves, never NaN/Inf
    return p;
}

int main() {
    int dev = 0, major = 0, minor = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_OK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    const int sm = 10 * major + minor;
    const Case cases[] = {
        {17, 260, 192, 4, 64, 0, 1, 1},    // M, N tails, three K tiles
        {33, 262, 256, 8, 32, 1, 1, 1},    // INT8, N % 4 != 0, two groups per K tile, BF16
        {130, 132, 4096, 4, 128, 0, 0, 1}, // few tiles: split-K variants split
        {20, 68, 2048, 8, -1, 1, 0, 0},    // per-channel
        {17, 34048, 1024, 4, 128, 0, 1, 0}, // 266 N tiles: full waves + split tail tiles (ws tail split, clusters)
        {17, 12800, 1088, 4, 64, 1, 1, 1}, // 100 N tiles, 17 K tiles: stream-K shares crossing tile boundaries
        {145, 260, 1088, 6, -1, 0, 0, 1},  // FP6 (layout 2): every token tile's M tail, N tail
        {333, 2560, 1088, 6, 64, 1, 0, 0},  // FP6, 40 tiles: tail splits and stream-K of every token tile
    };
    int failures = 0, runs = 0;
    for (const Case& c : cases) {
        const size_t act = 2;
        const int ng = c.group == -1 ? 1 : c.k / c.group;
        const int inter = c.bits == 8 ? 2 : 4;
        void* a = dalloc(size_t(c.m) * c.k * act, 1);
        const size_t row_words = c.bits == 6 ? size_t(c.k) / 4 * 3 : size_t(c.k) / 2;  // FP6: 4-bit + 2-bit words
        void* b = dalloc(size_t(c.n / inter) * row_words * 4, 2);
        void* s = dalloc(size_t(ng) * c.n * act, 3);
        void* z = c.zeros ? dalloc(size_t(ng) * c.n * act, 4) : nullptr;
        void* bias = c.bias ? dalloc(size_t(c.n) * act, 5) : nullptr;
        void* y = dalloc(size_t(c.m) * c.n * act, 6);
        trt_woq_linear_params p{};
        p.activation = a;
        p.packed_weight = b;
        p.scales = s;
        p.zeros = z;
        p.bias = bias;
        p.output = y;
        p.m = c.m;
        p.n = c.n;
        p.k = c.k;
        p.weight_format = c.bits == 8 ? TRT_WOQ_WEIGHT_INT8 : c.bits == 6 ? TRT_WOQ_WEIGHT_FP6_E3M2 : TRT_WOQ_WEIGHT_INT4;
        p.group_size = c.group;
        p.layout_version = c.bits == 6 ? 2 : 1;
        p.act_type = c.bf16 ? TRT_WOQ_ACT_BF16 : TRT_WOQ_ACT_FP16;
        for (int id = -1; id < trt_woq_gemm_candidate_count(); ++id) {
            if (id >= 0 && trt_woq_gemm_candidate_supports(id, &p, sm) != TRT_WOQ_OK) continue;
            const size_t ws = trt_woq_gemm_workspace_size(id, &p, sm);
            void* w = ws ? dalloc(ws, 7) : nullptr;
            p.workspace = w;
            p.workspace_size = ws;
            const trt_woq_status st = trt_woq_gemm_run(id, &p, nullptr);
            const cudaError_t e = cudaDeviceSynchronize();
            char name[64] = "auto";
            if (id >= 0) trt_woq_gemm_candidate_describe(id, name, sizeof(name));
            ++runs;
            if (st != TRT_WOQ_OK || e != cudaSuccess) {
                std::printf("FAIL %s M=%d N=%d K=%d bits %d: status %d, %s\n", name, c.m, c.n, c.k, c.bits, st,
                            cudaGetErrorName(e));
                ++failures;
            }
            if (w) cudaFree(w);
        }
        for (void* ptr : {a, b, s, z, bias, y})
            if (ptr) cudaFree(ptr);
    }
    std::printf("%d runs, %d failures\n%s\n", runs, failures, failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
