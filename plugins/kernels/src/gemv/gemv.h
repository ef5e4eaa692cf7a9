/*
 * Internal interface of the small-batch GEMV family (M = 1 .. 16; the warp-specialized row copies up to 64): the
 * launch plan chosen on the host and the per-(bits, activation type) launchers, each compiled in its own translation
 * unit (gemv_i4_f16.cu, ...) so the build runs them in parallel.
 */
#ifndef TRT_WOQ_GEMV_H
#define TRT_WOQ_GEMV_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "trt_woq/kernels.h"

namespace trt_woq {
namespace gemv {

constexpr int kMaxM = 16;
constexpr int kMaxWarps = 8;

constexpr int kStages = 3;    // cp.async pipeline depth (chunks in flight per warp: kStages - 1)
constexpr int kStagesXs = 4;  // the same for the shared-activation kernels (one barrier per chunk: one stage more)

/* Where a CTA's activations live: each warp's own pipeline, one ring shared by the CTA's warps (a barrier per
 * chunk), or the CTA's whole K split resident in shared memory (copied once; warps run without barriers). */
enum XMode { kPrivateX = 0, kRingX = 1, kResidentX = 2 };

/* What the host decides before the launcher (which adds the cluster split from the kernel's occupancy). */
struct Plan {
    int nt;                // tiles of 8 output channels per warp (xs) or per CTA: 2, 4 or 8
    int mt;                // 8 (M <= 8: A rows 8..15 are zero) or 16
    int warps;             // per CTA at most; they split the CTA's K range
    bool cluster;          // may split K over a thread-block cluster (SM90)
    int k_parts;           // contiguous parts of a CTA's K range walked at once (1 or 4: fronts per packed row)
    int sms;               // multiprocessors of the device
    int stages;            // kStages
    bool fit;              // fewer warps per CTA (down to half) when that makes every CTA resident at once
    int xs;                // XMode; shared (ring, resident): the warps own different channels and read one tile
    int smem_optin;        // per-block shared-memory limit of the device, bytes
    size_t smem_per_warp;  // stages x stage_bytes()
    int64_t tiles;         // CTAs along N
};

/* Per (weight format, activation type) launchers; they switch on plan.nt / plan.mt, the scale mode and zeros. */
trt_woq_status launch_i4_f16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream);
trt_woq_status launch_i4_bf16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream);
trt_woq_status launch_i8_f16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream);
trt_woq_status launch_i8_bf16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream);
trt_woq_status launch_f6_f16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream);
trt_woq_status launch_f6_bf16(const Plan& plan, const trt_woq_linear_params* p, cudaStream_t stream);

/* The warp-specialized kernel's CTA: 4 consumer warps of 32 channels and a producer warp (gemv_ws.cuh). */
constexpr int kWsConsumerWarps = 4;
constexpr int kWsWarpChannels = 32;  // NT = 4 tiles of 8 per consumer warp
constexpr int kWsChannels = kWsConsumerWarps * kWsWarpChannels;

/* Largest M of the row-copy kernel (MT = 32 / 64: 4 / 8 activation column tiles per converted weight fragment). */
constexpr int kWsMaxM = 64;

/* The warp-specialized kernel (gemv_ws.cuh; SM90a), INT4 / INT8 (tensor copies: FP6 too), either activation type,
 * stages loaded with tensor copies (tma) or one bulk copy per row; sms and smem_per_sm (bytes) describe the device. */
template <int BITS>
trt_woq_status launch_ws(const trt_woq_linear_params* p, bool tma, int sms, int smem_per_sm, cudaStream_t stream);

/* Shared-memory bytes of one warp's weights, scales and zeros per stage (gemv_kernel's stage layout); the shared-
 * activation kernels leave out the scale / zero areas their mode never reads. */
inline size_t warp_stage_bytes(trt_woq_weight_format format, int nt, bool scales = true, bool zeros = true) {
    return static_cast<size_t>(nt) * 512                               // weights (FP6: its 4-bit words): 32 x 16 B
           + (scales ? static_cast<size_t>(nt) * 128 : 0)              // scales: 32 lanes x 4 B per tile
           + (zeros ? static_cast<size_t>(nt) * 128 : 0)               // zeros: the same
           + (format == TRT_WOQ_WEIGHT_FP6_E3M2 ? static_cast<size_t>(nt) * 256 : 0);  // FP6 2-bit words: 8 B
}

/* Shared-memory bytes of the activations per stage: m rows of one chunk (128 k for INT4 / FP6, 64 for INT8). */
inline size_t act_stage_bytes(trt_woq_weight_format format, int64_t m) {
    return static_cast<size_t>(m) * (format == TRT_WOQ_WEIGHT_INT8 ? 64 : 128) * 2;
}

/* Shared-memory bytes of a resident CTA's activations and folded-conversion row sums (gemv_kernel's layout), for
 * `cps` chunks of a K split and MT activation rows per tile. */
inline size_t resident_smem_bytes(const trt_woq_linear_params* p, int mt, int64_t cps) {
    const bool fold = p->weight_format == TRT_WOQ_WEIGHT_INT4 && (p->group_size == -1 || p->group_size >= 128);
    return static_cast<size_t>(cps) * (act_stage_bytes(p->weight_format, p->m) + (fold ? mt / 8 * 64 : 0));
}

/* Shared-memory bytes one warp's pipeline needs per stage (its own activation copy). */
inline size_t stage_bytes(trt_woq_weight_format format, int nt, int64_t m) {
    return warp_stage_bytes(format, nt) + act_stage_bytes(format, m);
}

}  // namespace gemv
}  // namespace trt_woq

#endif /* TRT_WOQ_GEMV_H */
