/*
 * The GEMV family's candidates: launch planning (warps, cluster split of K) and the registry entries.
 * The kernel itself is gemv_kernel.cuh.
 */
#include <cuda_runtime.h>

#include <algorithm>

#include "candidates.h"
#include "gemv/gemv.h"

namespace trt_woq {
namespace gemv {
namespace {

struct DeviceInfo {
    int sms = 0;
    int smem_per_sm = 0;     // bytes
    int smem_optin = 0;      // per block, bytes
};

/* Cached per device (attributes never change). */
trt_woq_status device_info(DeviceInfo* out) {
    static DeviceInfo cache[64];
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return record_cuda_error(err);
    if (dev >= 0 && dev < 64 && cache[dev].sms != 0) {
        *out = cache[dev];
        return TRT_WOQ_OK;
    }
    DeviceInfo d;
    err = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return record_cuda_error(err);
    if (dev >= 0 && dev < 64) cache[dev] = d;
    *out = d;
    return TRT_WOQ_OK;
}

/* NT = tiles of 8 channels per CTA (XS: per warp); CLUSTER = may split K over a thread-block cluster (SM90); k_parts =
 * places at which a CTA walks its K range at once; XS = the warps share one activation tile (the launcher sizes those
 * CTAs). */
Plan make_plan(const trt_woq_linear_params* p, int nt, bool cluster, int k_parts, int xs, const DeviceInfo& dev) {
    Plan pl;
    pl.xs = xs;
    pl.k_parts = k_parts;
    pl.stages = kStages;
    pl.fit = !cluster && p->m <= 8;  // measured: INT8 8192 x 10240, M = 1, 35.9 -> 31.2 us (docs/performance.md)
    pl.nt = nt;
    pl.mt = (nt == 8 || p->m > 8) ? 16 : 8;
    pl.cluster = cluster;
    pl.sms = dev.sms;
    pl.smem_optin = dev.smem_optin;
    pl.smem_per_warp = pl.stages * stage_bytes(p->weight_format, nt, p->m);
    pl.tiles = (p->n + 8 * nt - 1) / (8 * nt);
    // At most ~110 KB per CTA (two CTAs per H100/A100 SM), within the per-block limit. M > 8 with at most one CTA per
    // SM takes the whole limit: 16 activation rows are 4 KB per warp and stage, so 110 KB leave 3 (NT = 8) to 5
    // (NT = 4) warps (measured: INT4 nt8_cluster 14336 x 4096, M = 16, 47.7 -> 26.9 us; docs/performance.md).
    const bool one_wave = p->m > 8 && pl.tiles <= dev.sms;
    const size_t budget = std::min<size_t>(one_wave ? dev.smem_optin : 110 * 1024,
                                           static_cast<size_t>(dev.smem_optin));
    pl.warps = static_cast<int>(std::min<size_t>(kMaxWarps, std::max<size_t>(1, budget / pl.smem_per_warp)));
    return pl;
}

/* Whether a resident-activation CTA (4 warps, the largest cluster split) fits in SM90's per-block shared memory
 * (227 KB; a query must not need the device, and every SM90 part has this limit). */
bool resident_fits(const trt_woq_linear_params* p, int nt) {
    constexpr size_t kSm90SmemOptin = 232448;
    const int64_t kc = p->weight_format == TRT_WOQ_WEIGHT_INT8 ? 64 : 128;
    const int64_t cps = ((p->k + kc - 1) / kc + 7) / 8;
    const size_t part = warp_stage_bytes(p->weight_format, nt, p->group_size != -1, p->group_size != -1 && p->zeros);
    return resident_smem_bytes(p, p->m > 8 ? 16 : 8, cps) + kMaxWarps / 2 * kStages * part <= kSm90SmemOptin;
}

/* The checks every GEMV candidate shares: layout 2 (FP6) takes layout 1's INT4 constraints and no zero points
 * (docs/layouts.md); int indexing inside the kernels; grid.y holds the CTAs of `channels` outputs. */
trt_woq_status shape_supported(const trt_woq_linear_params* p, int channels) {
    if (p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2 && (p->k % 64 != 0 || p->n % 4 != 0 || p->zeros != nullptr)) {
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
    if (p->k > (1 << 28) || p->n > (1 << 30) || (p->n + channels - 1) / channels > 65535) {
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    }
    return TRT_WOQ_OK;
}

template <int NT, bool CLUSTER, int KPARTS = 1, int XS = kPrivateX>
trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm) {
    if (sm < 80 || (CLUSTER && sm < 90)) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    if (p->m > kMaxM || ((NT == 2 || NT == 6) && p->m > 8 && XS != kResidentX)) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (XS == kResidentX && !resident_fits(p, NT)) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    return shape_supported(p, 8 * NT);
}

size_t no_workspace(const trt_woq_linear_params*, int32_t) {
    return 0;
}

template <int NT, bool CLUSTER, int KPARTS = 1, int XS = kPrivateX>
trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    // 4-byte scale/zero pairs are read with cp.async: 4-byte alignment (TensorRT gives 256).
    if ((reinterpret_cast<uintptr_t>(p->scales) | reinterpret_cast<uintptr_t>(p->zeros)) % 4 != 0) {
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    DeviceInfo dev;
    const trt_woq_status s = device_info(&dev);
    if (s != TRT_WOQ_OK) return s;
    const Plan plan = make_plan(p, NT, CLUSTER, KPARTS, XS, dev);
    const bool bf16 = p->act_type == TRT_WOQ_ACT_BF16;
    if (p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2) {
        return bf16 ? launch_f6_bf16(plan, p, stream) : launch_f6_f16(plan, p, stream);
    }
    if (p->weight_format == TRT_WOQ_WEIGHT_INT4) {
        return bf16 ? launch_i4_bf16(plan, p, stream) : launch_i4_f16(plan, p, stream);
    }
    return bf16 ? launch_i8_bf16(plan, p, stream) : launch_i8_f16(plan, p, stream);
}

/* Whether `a` CTAs spread over `sms` SMs at least as evenly as `b` CTAs do: a / (sms x busiest SM's count) against
 * the same for b (1 = every SM runs the same number). */
bool spreads_as_evenly(int64_t a, int64_t b, int64_t sms) {
    const int64_t busiest_a = (a + sms - 1) / sms;
    const int64_t busiest_b = (b + sms - 1) / sms;
    return a * busiest_b >= b * busiest_a;
}

/* Dispatch preference (the GEMV family scores 91..100 for M <= 16; the GEMM family's pick scores 5 there).
 * From the candidate sweeps of `python -m trt_woq.bench --candidates` on H100 (docs/performance.md):
 *   M <= 8, INT4: 6 tiles walked at 4 K places at once (`_kparts4`) when those CTAs spread over the SMs at least as
 *                 evenly as 4 tiles' (N = 6144: 128 CTAs instead of 192 on 132 SMs; N = 10240: 214 instead of 320);
 *                 else 4 tiles, at 4 K places from K = 8192 on (8192 x 57344, M = 1: 102.2 vs 107.2 us for 6 tiles);
 *   M <= 8, INT8: 2 tiles at 4 K places; 4 tiles at 4 K places from K = 16384 on (measured at K = 28672);
 *   M > 8, INT8: 8 tiles split over a cluster when N >= 8192 (fewer tiles than that leave SMs idle), else 4 tiles;
 *   M > 8, INT4 on SM90: the GEMM family's pick, except 8 tiles (no cluster) when K >= 8192 and the 64-channel CTAs
 *                 fill one wave (90 % of the SMs or more, one CTA each: N = 8192 on 132 SMs) or make 6 waves or more
 *                 (N = 57344); also up to M = 12 with K < 8192 where the GEMV's CTAs fit in one wave: 4 tiles when
 *                 32-channel CTAs do (N = 4096), else 8 (N = 6144) (M = 10, 12: 10.2-10.3 vs 11.0 us, 15.1-15.2 vs
 *                 16.2-16.3 us; the GEMM from M = 14: 11.4 vs 11.2, 16.4 vs 15.9); elsewhere the GEMM's wgmma split-K
 *                 kernel measured faster or even (14336 x 4096, 8192 x 10240, 4096 x 28672);
 *   2 <= M <= 16, INT4 on SM90 (`tests/device/sweep_gemv.py`): the shared-activation ring CTAs (score 101) where
 *                 256-channel CTAs cover 80 % of the SMs or more (N = 28672, 57344 on 132 SMs; e.g. 8192 x 57344,
 *                 M = 8: 109.9 vs 133.3 us, 4096 x 28672, M = 4: 33.8 vs 38.3); at M = 1 and on narrower N they
 *                 measured slower; the resident-activation CTAs (score 102) as resident_pick() says. */
/* Whether N is wide enough for the ring CTAs (256 channels each cover 80 % of the SMs or more). */
bool ring_wide(const trt_woq_linear_params* p, const DeviceInfo& dev) {
    return (p->n + 255) / 256 * 10 >= 8 * int64_t{dev.sms};
}

/* Tiles per warp of the resident-activation CTAs the dispatch prefers for p (0: none), INT4 on SM90 where N is not
 * ring-wide. H100, tests/device/sweep_gemv.py, against the fastest per-warp-pipeline candidate in the same run:
 *   6 <= M <= 8: 2 tiles when K >= 8192 and N <= 8192, else 4 (M = 8: 14336 x 4096 18.7 vs 23.8 us, 28672 x 8192
 *                65.0 vs 81.1, 8192 x 8192 23.6 vs 25.0, 4096 x 4096 8.9 vs 9.5, 4096 x 6144 11.4 vs 12.3; at M = 4
 *                the per-warp pipelines were as fast or faster on 4 of 6 shapes);
 *   9 <= M <= 16: 4 tiles, except where the GEMV's nt8 (K >= 8192, 64-channel CTAs in one wave or >= 6 waves) or
 *                nt4 / the GEMM (K < 8192 and 32-channel CTAs in one wave: N = 4096) stay. M = 12 / 16 against the
 *                dispatch's earlier picks (nt8 / the GEMM, timed in the previous call on the same machine): 4096 x 6144
 *                13.6 / 14.0 vs 15.3 / 16.7 us, 8192 x 10240 34.9 / 36.0 vs 38.4 / 38.6, 14336 x 4096 20.3 vs 25.6
 *                at M = 12; from M = 13 also not where K >= 8192 and the 64-channel CTAs fill less than a wave
 *                (14336 x 4096, M = 15 / 16: 29.5 / 30.2 us against the GEMM's 26.0 at M = 16, one run). */
int resident_pick(const trt_woq_linear_params* p, int32_t sm) {
    DeviceInfo dev;
    if (p->weight_format != TRT_WOQ_WEIGHT_INT4 || sm < 90 || p->m < 6 || device_info(&dev) != TRT_WOQ_OK ||
        ring_wide(p, dev)) {
        return 0;
    }
    if (p->m <= 8) return p->k >= 8192 && p->n <= 8192 ? 2 : 4;
    const int64_t tiles8 = (p->n + 63) / 64;
    const bool one_wave = tiles8 <= dev.sms && 10 * tiles8 >= 9 * int64_t{dev.sms};
    if (p->k >= 8192 && (one_wave || tiles8 >= 6 * int64_t{dev.sms})) return 0;
    if (p->k >= 8192 && p->m > 12 && 10 * tiles8 < 9 * int64_t{dev.sms}) return 0;
    if (p->k < 8192 && (p->n + 31) / 32 <= dev.sms) return 0;
    return 4;
}

template <int NT, bool CLUSTER, int KPARTS = 1, int XS = kPrivateX>
int32_t score(const trt_woq_linear_params* p, int32_t sm) {
    if (XS == kResidentX) return resident_pick(p, sm) == NT ? 102 : 1;
    if (XS) {
        DeviceInfo dev;
        const bool wide = device_info(&dev) == TRT_WOQ_OK && ring_wide(p, dev);
        return p->weight_format == TRT_WOQ_WEIGHT_INT4 && sm >= 90 && p->m >= 2 && wide ? 101 : 2;
    }
    int want_nt = 4;
    int want_kparts = 1;
    bool want_cluster = false;
    if (p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2) {
        // From `python -m trt_woq.bench --methods fp6_pc --candidates fp6` on H100 (M = 1, 4, 8, 12, 16 on
        // 14336 x 4096, 4096 x 28672, 8192 x 57344): nt4 (4 K places from K = 8192) at M <= 4, nt6_kparts4 up to
        // M = 8, nt8 over a cluster above (up to M = 16; the GEMM family's pick above).
        if (p->m <= 4) {
            want_kparts = p->k >= 8192 ? 4 : 1;
        } else if (p->m <= 8) {
            want_nt = 6;
            want_kparts = 4;
        } else if (sm >= 90) {
            want_nt = 8;
            want_cluster = true;
        }
    } else if (p->m <= 8 && p->weight_format == TRT_WOQ_WEIGHT_INT4) {
        DeviceInfo dev;
        const bool known = device_info(&dev) == TRT_WOQ_OK;
        const int64_t tiles6 = (p->n + 47) / 48;
        if (known && spreads_as_evenly(tiles6, (p->n + 31) / 32, dev.sms)) {
            want_nt = 6;
            want_kparts = 4;
        } else if (p->k >= 8192) {
            want_kparts = 4;
        }
    } else if (p->m <= 8) {
        want_nt = p->k >= 16384 ? 4 : 2;
        want_kparts = 4;
    } else if (p->weight_format == TRT_WOQ_WEIGHT_INT4 && sm >= 90) {
        DeviceInfo dev;
        const int64_t tiles8 = (p->n + 63) / 64;
        const int64_t sms = device_info(&dev) == TRT_WOQ_OK ? dev.sms : 0;
        const bool one_wave = tiles8 <= sms && 10 * tiles8 >= 9 * sms;
        if (p->k >= 8192 && sms > 0 && (one_wave || tiles8 >= 6 * sms)) {
            want_nt = 8;
        } else if (p->m <= 12 && p->k < 8192 && tiles8 <= sms) {
            want_nt = (p->n + 31) / 32 <= sms ? 4 : 8;
        } else {
            // The GEMV ranks below the GEMM's pick (score 5) and stays the fallback.
            return NT == 4 && !CLUSTER && KPARTS == 1 ? 4 : 3;
        }
    } else if (p->n >= 8192 && sm >= 90) {
        want_nt = 8;
        want_cluster = true;
    }
    const bool preferred = NT == want_nt && CLUSTER == want_cluster && KPARTS == want_kparts;
    if (preferred) return 100;
    return 92 + NT / 2 - (CLUSTER ? 0 : 1) - (KPARTS > 1 ? 1 : 0);  // 91 (nt2_kparts4) .. 96 (nt8_cluster)
}

/* The warp-specialized kernel (gemv_ws.cuh) on SM 9.0 (sm_90a code). TMA: stages loaded with tensor copies (M <= 16);
 * else one bulk copy per packed row (M <= 64). The formats each serves are its registry mask's (FP6: TMA only). */
template <bool TMA>
trt_woq_status ws_supports(const trt_woq_linear_params* p, int32_t sm) {
    if (sm != 90) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;  // sm_90a code runs on compute capability 9.0 only
    if (p->m > (TMA ? kMaxM : kWsMaxM)) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    return shape_supported(p, kWsChannels);
}

template <bool TMA>
trt_woq_status ws_launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    // Bulk and tensor copies need 16-byte aligned sources (TensorRT gives 256); others take the per-warp pipelines
    // (M <= 16) or refuse.
    if ((reinterpret_cast<uintptr_t>(p->activation) | reinterpret_cast<uintptr_t>(p->packed_weight)) % 16 != 0) {
        return p->m <= kMaxM ? launch<4, false>(p, stream) : TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
    DeviceInfo dev;
    const trt_woq_status s = device_info(&dev);
    if (s != TRT_WOQ_OK) return s;
    switch (p->weight_format) {
        case TRT_WOQ_WEIGHT_INT4: return launch_ws<4>(p, TMA, dev.sms, dev.smem_per_sm, stream);
        case TRT_WOQ_WEIGHT_FP6_E3M2: return launch_ws<6>(p, TMA, dev.sms, dev.smem_per_sm, stream);
        default: return launch_ws<8>(p, TMA, dev.sms, dev.smem_per_sm, stream);
    }
}

/* Dispatch preference of the warp-specialized candidates (H100, tests/device/sweep_gemv.py, 8 shapes x M = 1, 2, 4,
 * 8, 12, 16, against the other picks in the same run): the row-copy kernel (`gemv_ws_nt4`, score 103) for INT4 on SM90
 * where its 128-channel CTAs fill 80 % or more of one wave of two CTAs per SM, either without a K split (K <= 8192:
 * 4096 x 28672, M = 1 / 4 / 8 / 16: 26.9 / 28.7 / 30.9 / 39.0 us against 32.5 / 33.2 / 34.2 / 40.9) or split 8 ways
 * (K >= 12288: 14336 x 4096, 16.5 / 17.3 / 18.3 / 23.1 against 16.9 / 19.4 / 18.9 / 25.1) except at 9 <= M <= 12 there
 * (21.3 against the resident-activation CTAs' 20.0 at M = 12). Elsewhere it measured slower: fewer CTAs than slots
 * (4096 x 4096: 64 CTAs), several waves (8192 x 57344: 118.6 against 102.2 at M = 1), 8192 x 10240 (28.6 against
 * 24.6), and mixed on 28672 x 8192 (M = 1 / 8: 55.9 / 68.9 against 54.5 / 64.6; M = 4 / 16: 58.7 / 78.2 against 63.8 /
 * 85.1). The tensor-copy kernel (`gemv_wst_nt4`) measured slower than the per-warp pipelines for INT8 on every shape
 * and than the row copies for INT4 on most (score 1 there); it serves FP6 at M >= 8 (score 103) where its CTAs cover
 * 80 % of the slots, split 8 ways from K = 12288 (one H100 run, FP6 per channel, M = 8 / 16 against the per-warp
 * pipelines' picks: 14336 x 4096 23.7 / 25.6 us against 25.7 / 29.8, 4096 x 28672 39.0 / 42.0 against 42.6 / 55.1,
 * 8192 x 57344 138.1 / 159.6 against 142.5 / 167.4; at M = 1 slower on two of the three: 23.1 against 21.0 and 133.4
 * against 130.5).
 * Above M = 16 (one run, INT4 g128, against the GEMM family's pick, score 200): the row copies with 4 column tiles
 * (score 201) only where they are unsplit as above and M <= 24: 4096 x 28672, M = 17 / 24: 43.9 / 47.8 us against
 * 48.8 / 47.9; M = 32 / 48 / 64: 53.6 / 81.1 / 101.8 against 47.8 / 48.1 / 48.4; 14336 x 4096 (split 8 ways) M = 17:
 * 25.2 against 24.8; 8192 x 57344 M = 17: 190.3 against 166.2. Each further 8 rows adds a full column tile of
 * mma.sync per converted fragment, where the GEMM's wgmma tile of 64 rows costs the same from M = 17 to 64. */
template <bool TMA>
int32_t ws_score(const trt_woq_linear_params* p, int32_t sm) {
    DeviceInfo dev;
    if (sm != 90 || device_info(&dev) != TRT_WOQ_OK) return 1;
    const int64_t slots = 2 * int64_t{dev.sms};
    auto fills_one_wave = [&](int64_t ctas) { return ctas <= slots && 10 * ctas >= 8 * slots; };
    const int64_t tiles = (p->n + 127) / 128;
    if (TMA) {  // FP6 at M >= 8 where the CTAs (split 8 ways from K = 12288) cover 80 % of the slots or more
        const bool wide = 10 * tiles >= 8 * slots || (p->k >= 12288 && 10 * 8 * tiles >= 8 * slots);
        return p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2 && p->m >= 8 && wide ? 103 : 1;
    }
    if (p->weight_format != TRT_WOQ_WEIGHT_INT4) return 1;
    const bool unsplit = p->k <= 8192 && fills_one_wave(tiles);
    if (p->m > kMaxM) return unsplit && p->m <= 24 ? 201 : 1;
    const bool split8 = p->k >= 12288 && fills_one_wave(8 * tiles) && (p->m <= 8 || p->m > 12);
    return unsplit || split8 ? 103 : 1;
}

}  // namespace
}  // namespace gemv

// Every entry runs every (bits, activation, group, zeros, bias) combination (the shared-activation ones INT8 / INT4
// only); they differ in channels per CTA and in whether K may be split over a thread-block cluster (SM90+). For
// compilation speed only these (NT, rows) pairs are built: (2, 8), (4, 8), (6, 8), (4, 16), (8, 16), and (2, 16)
// resident; so the per-warp NT = 2 and NT = 6 serve M <= 8 only. NT = 6 (48 channels) makes N = 6144 one CTA per SM
// on 132 SMs instead of NT = 4's uneven 1.45. (NT = 1 and a non-cluster split were slower everywhere in the H100
// sweep.)
#define TRT_WOQ_GEMV_CANDIDATE(name, NT, CLUSTER, KPARTS, XS)                                                   \
    {name, XS ? kIntWeightOnlyLinear : kWeightOnlyLinear, gemv::supports<NT, CLUSTER, KPARTS, XS>,               \
     gemv::no_workspace, gemv::launch<NT, CLUSTER, KPARTS, XS>, gemv::score<NT, CLUSTER, KPARTS, XS>}
const Candidate kGemvCandidates[] = {
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt2", 2, false, 1, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt4", 4, false, 1, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt6", 6, false, 1, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt8", 8, false, 1, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt2_cluster", 2, true, 1, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt4_cluster", 4, true, 1, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt8_cluster", 8, true, 1, gemv::kPrivateX),
    // The same kernels walking a CTA's K range at 4 places at once (4 DRAM fronts per packed row instead of 1).
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt2_kparts4", 2, false, 4, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt4_kparts4", 4, false, 4, gemv::kPrivateX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_nt6_kparts4", 6, false, 4, gemv::kPrivateX),
    // Shared activations: 4 tiles per warp, 4 or 8 warps per CTA reading one activation tile, K over a cluster.
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_xs_nt4_cluster", 4, true, 1, gemv::kRingX),
    // The same CTAs with the split's activations resident in shared memory (copied once, no barrier per chunk) and
    // the folded conversion's row sums computed once per CTA.
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_xr_nt4_cluster", 4, true, 1, gemv::kResidentX),
    TRT_WOQ_GEMV_CANDIDATE("gemv_mma_xr_nt2_cluster", 2, true, 1, gemv::kResidentX),
    // Warp-specialized: a producer warp's bulk copies into a ring of stages, 4 consumer warps of 32 channels.
    {"gemv_ws_nt4", kIntWeightOnlyLinear, gemv::ws_supports<false>, gemv::no_workspace, gemv::ws_launch<false>,
     gemv::ws_score<false>},
    // The same with each stage loaded by tensor copies (TMA): a few boxes instead of a copy per packed row; FP6 too.
    {"gemv_wst_nt4", kWeightOnlyLinear, gemv::ws_supports<true>, gemv::no_workspace, gemv::ws_launch<true>,
     gemv::ws_score<true>},
};
const int kGemvCandidateCount = sizeof(kGemvCandidates) / sizeof(kGemvCandidates[0]);

}  // namespace trt_woq
