// Host side of the mma.sync GEMM: the compiled tile configurations, the candidate list (configuration x split-K),
// checks, workspace sizes, the heuristic, and the launches. The kernel itself is gemm_mma.cuh.
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "../candidates.h"
#include "../pdl.cuh"
#include "gemm.h"
#include "gemm_mma.cuh"
#include "gemm_wgmma.cuh"
#include "gemm_wgmma_ws.cuh"

namespace trt_woq {
namespace gemm {
namespace {

// The tile configurations compiled (each for INT4/INT8 x FP16/BF16 = 4 kernels per arch; kept few for build time):
//   0 128x128, 8 warps (2x4, warp tile 64x32), 4 stages: large M, compute bound; 4 m16 x 4 n8 tiles per warp
//     amortise each converted B fragment over 4 mma and each A fragment over 4.
//   1 128x128, 3 stages, registers capped for 2 CTAs per SM (some spills): the same for GPUs with 99 KB of shared
//     memory per block (SM86/SM89), where 4 INT8 stages do not fit, and an occupancy experiment on SM90.
//   2 64x128, 4 warps (1x4, warp tile 64x32), 4 stages: M of 33..256, and larger M when 128-row tiles leave SMs
//     idle. One warp row, so every B fragment is converted once per CTA (a 2x2 layout converts each twice).
//   3 32x128, 4 warps (1x4, warp tile 32x32), 6 stages: M of 17..64, bound by the weight stream, so deeper
//     prefetch and more CTAs per SM rather than a larger tile.
//   4 (SM90 only) wgmma, 128 channels x 64 tokens, 2 warpgroups, the weights as wgmma's register operand
//     (gemm_wgmma.cuh), 6 stages: with split-K, the M <= 64 problems with few tiles (see heuristic).
//   5 (SM90) 128 channels x 128 tokens, 4 stages, registers capped for 2 CTAs per SM: with split-K, the same for
//     M > 64.
//   6 (SM90) one warpgroup, 64 channels x 64 tokens: twice the CTAs of 4, for small M where 128-channel tiles give
//     fewer than two waves.
//   7, 8 (SM90) warp-specialized (gemm_wgmma_ws.cuh: TMA producer warp, 2 consumer warpgroups, 1 CTA per SM):
//     256 tokens x 128 channels (M > 128) and 128 tokens x 256 channels (M 65..128). Their second candidate is
//     the "tail split" (whole tiles for the full waves, the last partial wave split along K and summed in the
//     kernel) instead of the split-K + reduce kernel of the others; their third (ids 22-24)
//     "stream-K" (the last partial wave's K iterations shared equally by a wave of CTAs); tile 9 has the same two.
//   9 (SM90) warp-specialized 64 tokens x 128 channels, 8 stages (INT8: 6), 2 CTAs per SM, clusters of 2 CTAs
//     along N sharing the activation tile through multicast TMA: M <= 64 (bound by the weight stream).
//   10 (SM90) 7 in clusters of 2 along N with multicast activations: at M = 256 every 256 x 128 CTA re-reads a
//     2 MB (K = 4096) activation tile from L2 for 256 KB of weights.
//   11 .. 15 (SM90) the balanced token tiles with T = 144, 160, 176, 192, 224 tokens (wgmma N = T), so that M > 128
//     runs as equal token tiles that pad little (M = 333: 2 x 176 = 352 tokens where 256-token tiles compute 512).
//     No 208 or 240: the sweep's dispatch lost nothing without them, and each T costs 12 kernels of build time.
//   16 (SM90) 7 with two wgmma groups in flight (DEPTH 2, a third fragment buffer) while the next K tile
//     converts. A tactic only (TensorRT's timing picks it where it wins): in the H100 sweep it was 2-9 % faster than
//     7 on 8192 x 57344 at M = 768 .. 1024 and 1-6 % slower on the other shapes (docs/kernels_gemm.md). The balanced
//     tiles with DEPTH 2 measured no faster than with 1.
//   17 .. 21 (SM90) the balanced token tiles in clusters of 2 along N with multicast activations: at M = 333 the
//     consumers of a 176-token CTA waited for their next K tile in 14.5 % of the samples (ncu) while every CTA read
//     a 22.5 KB activation tile from L2 per 4 KB of INT4 weights; a cluster reads it once per pair. Tactics only:
//     up to 5 % faster at some points of the H100 sweep, slower on average, and no cost-model factor for them
//     gained anything over the sweep (docs/kernels_gemm.md).
enum class Kernel { kMma, kWgmma, kWgmmaWs };
struct TileConfig {
    const char* name;
    int bm, bn, stages;
    Kernel kernel;
    int cluster;    // ws: CTAs per cluster (neighbouring N tiles sharing the activation tile)
    int depth = 1;  // ws: wgmma groups in flight (gemm_wgmma_ws_kernel's DEPTH)
    bool sm90_only() const { return kernel != Kernel::kMma; }
};
constexpr TileConfig kTiles[] = {
    {"mma_128x128x64_s4", 128, 128, 4, Kernel::kMma, 1},
    {"mma_128x128x64_s3_o2", 128, 128, 3, Kernel::kMma, 1},
    {"mma_64x128x64_s4", 64, 128, 4, Kernel::kMma, 1},
    {"mma_32x128x64_s6", 32, 128, 6, Kernel::kMma, 1},
    {"wgmma_64x128x64_s6", 64, 128, 6, Kernel::kWgmma, 1},
    {"wgmma_128x128x64_s4_o2", 128, 128, 4, Kernel::kWgmma, 1},
    {"wgmma_64x64x64_s6", 64, 64, 6, Kernel::kWgmma, 1},
    {"wgmma_ws_256x128x64_s5", 256, 128, 5, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_128x256x64_s6", 128, 256, 6, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_64x128x64_s8_c2", 64, 128, 8, Kernel::kWgmmaWs, 2},
    {"wgmma_ws_256x128x64_s5_c2", 256, 128, 5, Kernel::kWgmmaWs, 2},
    {"wgmma_ws_144x128x64_s6", 144, 128, 6, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_160x128x64_s6", 160, 128, 6, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_176x128x64_s6", 176, 128, 6, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_192x128x64_s6", 192, 128, 6, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_224x128x64_s6", 224, 128, 6, Kernel::kWgmmaWs, 1},
    {"wgmma_ws_256x128x64_s5_d2", 256, 128, 5, Kernel::kWgmmaWs, 1, 2},
    {"wgmma_ws_144x128x64_s6_c2", 144, 128, 6, Kernel::kWgmmaWs, 2},
    {"wgmma_ws_160x128x64_s6_c2", 160, 128, 6, Kernel::kWgmmaWs, 2},
    {"wgmma_ws_176x128x64_s6_c2", 176, 128, 6, Kernel::kWgmmaWs, 2},
    {"wgmma_ws_192x128x64_s6_c2", 192, 128, 6, Kernel::kWgmmaWs, 2},
    {"wgmma_ws_224x128x64_s6_c2", 224, 128, 6, Kernel::kWgmmaWs, 2},
};
constexpr int kNumTiles = sizeof(kTiles) / sizeof(kTiles[0]);
// Candidates, appended in groups so that the older ids keep their meaning: id = 2 * tile + splitk for tiles 0-10,
// then the stream-K variant of tiles 7, 8, 9 (not of the clustered 256 x 128 tile 10), then whole / tail split /
// stream-K of each tile from 11 on. The split variants exist only where they split (split >= 2).
enum Variant { kWhole, kSplit, kStreamK };
constexpr int kFirstWsTile = 7, kNumStreamK = 3, kFirstBalancedTile = 11;
constexpr int kNumCandidates = 2 * kFirstBalancedTile + kNumStreamK + 3 * (kNumTiles - kFirstBalancedTile);
static_assert(kNumCandidates == kCandidateCount, "gemm.h's kCandidateCount and the registry's list follow this table");
constexpr int kFirstStreamKId = 2 * kFirstBalancedTile, kFirstBalancedId = kFirstStreamKId + kNumStreamK;
int tile_of(int id) {
    if (id < kFirstStreamKId) return id / 2;
    if (id < kFirstBalancedId) return kFirstWsTile + id - kFirstStreamKId;
    return kFirstBalancedTile + (id - kFirstBalancedId) / 3;
}
Variant variant_of(int id) {
    if (id < kFirstStreamKId) return Variant(id % 2);
    return id < kFirstBalancedId ? kStreamK : Variant((id - kFirstBalancedId) % 3);
}
int candidate_id(int tile, Variant v) {
    if (tile >= kFirstBalancedTile) return kFirstBalancedId + 3 * (tile - kFirstBalancedTile) + v;
    return v == kStreamK ? kFirstStreamKId + tile - kFirstWsTile : 2 * tile + v;
}
constexpr int kMaxSplit = 16;
// Split-K aims for about two waves of CTAs on a large GPU (132 SMs on H100); a fixed figure keeps the workspace
// size a function of the problem alone, as the C ABI requires.
constexpr int kSms = 132;
constexpr int kTargetCtas = 2 * kSms;
constexpr int kMinKTilesPerSplit = 4;
constexpr int kMaxTailSplitAlone = 4;  // heuristic: most slices of a tail split without whole tiles
constexpr int kPdlMaxWaves = 4;        // ws launches that share tiles after fewer whole waves overlap the clearing
// CTAs (cluster units) of warp-specialized tile `t` that run at once on kSms SMs: one wave.
int64_t ws_wave(const TileConfig& t) { return kSms * ws_ctas_per_sm(t.bm) / t.cluster; }

int smem_bytes(const TileConfig& t, int bits) {
    const int inter = bits == 8 ? 2 : 4;
    const int stage = t.bm * kBK * 2 + (t.bn / inter) * packed_line_bytes(bits) + 2 * (2 * t.bn * 2);
    if (t.kernel == Kernel::kWgmmaWs) return ws_geometry(t.bm, t.bn, t.stages, bits).smem_bytes;
    if (t.kernel == Kernel::kWgmma) return t.stages * ((stage + 1023) / 1024 * 1024) + 1024;  // aligned stages + slack
    return t.stages * stage;
}

// Every ws tile fits SM90's shared memory (balanced_pick relies on it).
constexpr bool ws_tiles_fit_sm90() {
    for (const TileConfig& t : kTiles)
        for (int bits : {4, 6, 8})
            if (t.kernel == Kernel::kWgmmaWs && ws_geometry(t.bm, t.bn, t.stages, bits).smem_bytes > 227 * 1024)
                return false;
    return true;
}
static_assert(ws_tiles_fit_sm90(), "a warp-specialized tile exceeds SM90's shared memory");

int smem_limit(int sm) {
    if (sm >= 90) return 227 * 1024;
    if (sm == 80 || sm == 87) return 163 * 1024;
    return 99 * 1024;  // SM86, SM89
}

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

struct Plan {
    int tile;
    int split;              // split-K: K slices launched; ws: the CTAs sharing a tile (at least), 1 if none shared
    int k_tiles_per_split;  // split-K: K tiles per slice; ws: each sharing CTA's share of K iterations
    int64_t tiles;          // output tiles (ws: cluster units of `cluster` neighbouring N tiles)
    int64_t dp_tiles;       // ws: units computed whole (the full waves); the CTAs after them share the others
    int tile_iters;         // ws: iterations per shared tile (K tiles; the tail split pads them to split x share)
    int64_t shared_ctas;    // ws: CTA units sharing the tiles after dp_tiles
    bool two_pieces;        // ws: a sharing CTA may cross a tile boundary (stream-K)
};

Plan make_plan(int id, const trt_woq_linear_params& p) {
    const TileConfig& t = kTiles[tile_of(id)];
    const int k_tiles = static_cast<int>(p.k / kBK);
    const int64_t tiles = int64_t(ceil_div(p.m, t.bm)) * ceil_div(ceil_div(p.n, t.bn), t.cluster);
    const Variant v = variant_of(id);
    Plan plan{tile_of(id), 1, k_tiles, tiles, tiles, k_tiles, 0, v == kStreamK};
    if (v == kWhole) return plan;
    if (t.kernel == Kernel::kWgmmaWs) {
        // The units of the last partial wave get shared so that the sharing CTAs fill about one wave.
        const int64_t wave = ws_wave(t), dp = tiles / wave * wave, tail = tiles - dp;
        if (tail == 0) return plan;
        int share;
        if (v == kSplit) {  // `split` equal K slices per tile, one per CTA
            int split = static_cast<int>(std::min<int64_t>(kMaxSplit, wave / tail));
            while (split > 1 && k_tiles / split < kMinKTilesPerSplit) --split;
            if (split < 2) return plan;
            share = ceil_div(k_tiles, split);
            plan.tile_iters = ceil_div(k_tiles, share) * share;
        } else {  // stream-K: equal shares of all the tail's iterations, at least 1/kMaxSplit of K and 4 K tiles
            share = std::max({ceil_div(tail * k_tiles, wave), ceil_div(k_tiles, kMaxSplit), kMinKTilesPerSplit});
            if (share >= k_tiles) return plan;
        }
        if (tail * plan.tile_iters >= INT32_MAX) return plan;  // the kernel counts shared iterations in int
        plan.k_tiles_per_split = share;  // <= tile_iters: a CTA touches at most two tiles (gemm_wgmma_ws.cuh)
        plan.split = ceil_div(plan.tile_iters, share);
        plan.dp_tiles = dp;
        plan.shared_ctas = ceil_div(tail * plan.tile_iters, share);
        return plan;
    }
    int split = 1;
    while (split < kMaxSplit && tiles * split * 2 <= kTargetCtas && k_tiles / (split * 2) >= kMinKTilesPerSplit)
        split *= 2;
    plan.k_tiles_per_split = ceil_div(k_tiles, split);
    plan.split = ceil_div(k_tiles, plan.k_tiles_per_split);
    return plan;
}

// Bits per weight, what the kernels are templated on.
int bits_of(const trt_woq_linear_params& p) {
    return p.weight_format == TRT_WOQ_WEIGHT_FP6_E3M2 ? 6 : p.weight_format == TRT_WOQ_WEIGHT_INT8 ? 8 : 4;
}

trt_woq_status check_problem(const trt_woq_linear_params* p) {
    if (p == nullptr) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->m < 1 || p->n < 1 || p->k < 1) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->n > 65535 * 128) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;  // grid.y = N / BN
    if (p->act_type != TRT_WOQ_ACT_FP16 && p->act_type != TRT_WOQ_ACT_BF16) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    const bool fp6 = p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2;
    if (p->weight_format != TRT_WOQ_WEIGHT_INT4 && p->weight_format != TRT_WOQ_WEIGHT_INT8 && !fp6)
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    if (p->layout_version != (fp6 ? 2 : 1)) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (fp6 && p->zeros != nullptr) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;  // FP6 is symmetric (layout 2)
    // int indices inside the kernel: rows, columns and K below 2^31, and M * N partial planes below 2^40.
    if (p->m >= (int64_t(1) << 31) || p->n >= (int64_t(1) << 31) || p->k >= (int64_t(1) << 31))
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (p->k % kBK != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (p->n % (p->weight_format == TRT_WOQ_WEIGHT_INT8 ? 2 : 4) != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    const int g = p->group_size;
    if (g != -1 && g != 32 && g != 64 && g != 128 && g != 256) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    if (g != -1 && p->k % g != 0) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    return TRT_WOQ_OK;
}

}  // namespace

trt_woq_status supports(int id, const trt_woq_linear_params* p, int sm) {
    if (id < 0 || id >= kNumCandidates) return TRT_WOQ_ERR_INVALID_ARGUMENT;
    const trt_woq_status st = check_problem(p);
    if (st != TRT_WOQ_OK) return st;
    if (sm < 80) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    const TileConfig& t = kTiles[tile_of(id)];
    if (smem_bytes(t, bits_of(*p)) > smem_limit(sm))
        return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    // wgmma is sm_90a only (the library builds 90a-real; it does not run on later major versions either).
    if (t.sm90_only() && sm != 90) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;
    if (variant_of(id) != kWhole && make_plan(id, *p).split < 2)
        return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;  // nothing to split
    return TRT_WOQ_OK;
}

namespace {

// Workspace. Split-K: FP32 partials [split, M, N]. ws: one FP32 partial slot per sharing CTA that stores one (see
// WsSchedule), then one counter per shared tile.
int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }
int ws_slot_period(const Plan& plan) {
    return static_cast<int>(plan.tile_iters / gcd(plan.k_tiles_per_split, plan.tile_iters));
}
size_t shared_tiles(const Plan& plan) { return size_t(plan.tiles - plan.dp_tiles) * size_t(kTiles[plan.tile].cluster); }
size_t ws_partials_bytes(const Plan& plan) {
    const TileConfig& t = kTiles[plan.tile];
    const int64_t last = plan.shared_ctas - 1;  // never stores a partial; nor do the CTAs ending on a tile boundary
    const int64_t slots = last - last / ws_slot_period(plan);
    return size_t(slots) * size_t(t.cluster) * size_t(t.bm) * size_t(t.bn) * sizeof(float);
}
size_t ws_flags_bytes(const Plan& plan) { return shared_tiles(plan) * sizeof(unsigned int); }
size_t workspace_bytes(int id, const trt_woq_linear_params& p) {
    const Plan plan = make_plan(id, p);
    if (plan.split < 2) return 0;
    if (kTiles[plan.tile].kernel == Kernel::kWgmmaWs) return ws_partials_bytes(plan) + ws_flags_bytes(plan);
    return size_t(plan.split) * size_t(p.m) * size_t(p.n) * sizeof(float);
}

// Launches `kernel` (launch_ex: clusters of `cluster` CTAs along x; `pdl`: as a programmatic dependent of the
// stream's previous kernel, which must trigger it: ws_clear_flags) with `smem` bytes of dynamic shared memory, raising
// the kernel's limit once per device first (`done_mask`: the caller's static, one per kernel instantiation, bit i =
// device i done).
template <typename... Params>
trt_woq_status launch_kernel(void (*kernel)(Params...), dim3 grid, int threads, int smem,
                             std::atomic<uint64_t>& done_mask, cudaStream_t stream, int cluster, bool pdl,
                             const Params&... params) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return record_cuda_error(e);
    const uint64_t bit = uint64_t(1) << (dev & 63);
    if (!(done_mask.load(std::memory_order_relaxed) & bit)) {
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return record_cuda_error(e);
        done_mask.fetch_or(bit);
    }
    return launch_ex(kernel, grid, dim3(threads), smem, cluster, pdl, stream, params...);
}

template <int BM, int BN, int WM, int WN, int STAGES, int BITS, typename T, int MIN_CTAS = 1>
trt_woq_status launch_tile(const GemmArgs& args, int split, cudaStream_t stream) {
    constexpr int kWM = WM, kWN = WN, WARPS = WM * WN;
    auto kernel = gemm_mma_kernel<BM, BN, kWM, kWN, STAGES, BITS, T, MIN_CTAS>;
    const int smem = STAGES * StageLayout<BM, BN, BITS>::kBytes;
    static std::atomic<uint64_t> done_mask{0};  // one per instantiation
    return launch_kernel(kernel, dim3(ceil_div(args.m, BM), ceil_div(args.n, BN), split), WARPS * 32, smem, done_mask,
                         stream, 1, false, args);
}

template <int TOK, int STAGES, int BITS, typename T, int WGS = 2, int MIN_CTAS = 1>
trt_woq_status launch_wgmma(const GemmArgs& args, int split, cudaStream_t stream) {
    auto kernel = gemm_wgmma_kernel<TOK, STAGES, BITS, T, WGS, MIN_CTAS>;
    const int smem = STAGES * WgStage<TOK, BITS, WGS>::kBytes + 1024;
    static std::atomic<uint64_t> done_mask{0};  // one per instantiation
    return launch_kernel(kernel, dim3(ceil_div(args.m, TOK), ceil_div(args.n, 64 * WGS), split), 128 * WGS, smem,
                         done_mask, stream, 1, false, args);
}

// The driver's tensor-map encoder, reached through the runtime (the library does not link libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

// 2D row-major tensor [rows, inner] of `elem_bytes` elements, rows `stride` elements apart (0: inner), box
// [box_rows, box_inner], 128-byte swizzle (the inner box is 128 bytes) unless `swizzle` says otherwise,
// out-of-bounds elements zero-filled.
bool encode_2d(CUtensorMap* map, CUtensorMapDataType type, int elem_bytes, const void* base, uint64_t inner,
               uint64_t rows, uint32_t box_inner, uint32_t box_rows, uint64_t stride = 0,
               CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (encode == nullptr) return false;
    const cuuint64_t dims[2] = {inner, rows};
    const cuuint64_t strides[1] = {(stride ? stride : inner) * elem_bytes};
    const cuuint32_t box[2] = {box_inner, box_rows};
    const cuuint32_t elem_strides[2] = {1, 1};
    return encode(map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Zeroes the shared tiles' counters before a ws launch that shares tiles (the workspace may be shared, so every
// launch). It lets that launch start at once where it is a programmatic dependent (launch_wgmma_ws: before few
// whole waves): the ws kernel's K loop then runs while this one clears, and only its counter accesses wait for it
// (pdl_wait), so the clearing costs no serialized launch latency as a memset before the kernel did.
// Defined here, not in gemm_wgmma_ws.cuh: other translation units include that header.
__global__ void ws_clear_flags(unsigned int* flags, int n) { pdl_launch_dependents_clearing(flags, n); }

template <int TOK, int MT, int STAGES, int BITS, typename T, int CLUSTER = 1, int PIECES = 1, int DEPTH = 1>
trt_woq_status launch_wgmma_ws(const GemmArgs& args, const Plan& plan, void* workspace, cudaStream_t stream) {
    constexpr int kCH = kWsConsumers * MT * 64, kI = BITS == 8 ? 2 : 4;
    CUtensorMap tmap_x, tmap_w, tmap_w2;
    // Activations [M, K] (16-bit elements), box 64 k x TOK / CLUSTER rows (each CTA of a cluster loads its share);
    // packed weights [N / I lines, K / 2 words], box 32 words (one 128-byte line) x CH / I lines. FP6 rows are
    // 3 K / 4 words: the 4-bit words as INT4, then the 2-bit words [N / 4, K / 4], box 16 words x CH / 4 (tmap_w2;
    // the INT kernels get tmap_w again and never read it).
    const uint64_t row_words = BITS == 6 ? args.k / 4 * 3 : args.k / 2;
    if (!encode_2d(&tmap_x, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, args.a, args.k, args.m, kBK, TOK / CLUSTER) ||
        !encode_2d(&tmap_w, CU_TENSOR_MAP_DATA_TYPE_INT32, 4, args.b, args.k / 2, args.n / kI, kBK / 2, kCH / kI,
                   row_words))
        return record_cuda_error(cudaErrorInvalidValue);
    tmap_w2 = tmap_w;
    if (BITS == 6 && !encode_2d(&tmap_w2, CU_TENSOR_MAP_DATA_TYPE_INT32, 4, args.b + args.k / 2, args.k / 4,
                                args.n / kI, kBK / 4, kCH / kI, row_words, CU_TENSOR_MAP_SWIZZLE_NONE))
        return record_cuda_error(cudaErrorInvalidValue);
    WsSchedule sched{ceil_div(args.m, TOK), ceil_div(ceil_div(args.n, kCH), CLUSTER), static_cast<int>(plan.dp_tiles),
                     plan.k_tiles_per_split, plan.tile_iters, 1, nullptr, nullptr};
    if (plan.split > 1) {  // the shared tiles' counters start at zero in every launch (the workspace may be shared)
        sched.slot_period = ws_slot_period(plan);
        sched.partials = static_cast<float*>(workspace);
        sched.flags = reinterpret_cast<unsigned int*>(static_cast<char*>(workspace) + ws_partials_bytes(plan));
        const int flags = static_cast<int>(shared_tiles(plan));
        const trt_woq_status st =
            launch_ex(ws_clear_flags, dim3(std::min(ceil_div(flags, 256), kSms)), dim3(256), 0, 1, false, stream,
                      sched.flags, flags);
        if (st != TRT_WOQ_OK) return st;
    }
    auto kernel = gemm_wgmma_ws_kernel<TOK, MT, STAGES, BITS, T, CLUSTER, PIECES, DEPTH>;
    const int smem = ws_geometry(TOK, kCH, STAGES, BITS).smem_bytes;
    static std::atomic<uint64_t> done_mask{0};  // one per instantiation
    const int64_t ctas = (plan.dp_tiles + plan.shared_ctas) * CLUSTER;
    if (ctas > INT32_MAX) return TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
    // The counters' clearing overlaps the kernel (programmatic dependent launch) only before few whole waves: there
    // it saved 1.5-2.8 % (geometric means, H100 sweep); after 4 or more its latency is a small part of the run and
    // the overlapped launch measured 2 % slower with the tail split (8192 x 57344, M = 2048: 5-10 %).
    const bool pdl = plan.split > 1 && plan.dp_tiles < kPdlMaxWaves * ws_wave(kTiles[plan.tile]);
    return launch_kernel(kernel, dim3(static_cast<unsigned>(ctas)), ws_threads(TOK), smem, done_mask, stream, CLUSTER,
                         pdl, args, sched, tmap_x, tmap_w, tmap_w2, WsRowsIo{});
}

// A ws tile with a stream-K variant: the two-piece kernel for stream-K plans, the one-piece kernel otherwise.
template <int TOK, int MT, int STAGES, int BITS, typename T, int CLUSTER = 1, int DEPTH = 1>
trt_woq_status launch_wgmma_ws_pieces(const GemmArgs& args, const Plan& plan, void* workspace, cudaStream_t stream) {
    return plan.two_pieces ? launch_wgmma_ws<TOK, MT, STAGES, BITS, T, CLUSTER, 2, DEPTH>(args, plan, workspace, stream)
                           : launch_wgmma_ws<TOK, MT, STAGES, BITS, T, CLUSTER, 1, DEPTH>(args, plan, workspace, stream);
}

// A 128-channel tile of tiles 11 .. 21: TOK tokens, DEPTH wgmma groups in flight, CLUSTER CTAs along N.
template <int TOK, int STAGES, int DEPTH, int BITS, typename T, int CLUSTER = 1>
trt_woq_status launch_balanced(const GemmArgs& args, const Plan& plan, void* workspace, cudaStream_t stream) {
    return launch_wgmma_ws_pieces<TOK, 1, STAGES, BITS, T, CLUSTER, DEPTH>(args, plan, workspace, stream);
}

template <int BITS, typename T>
trt_woq_status launch_bits_type(const Plan& plan, const GemmArgs& args, void* workspace, cudaStream_t stream) {
    const int split = plan.split;
    switch (plan.tile) {
        case 0: return launch_tile<128, 128, 2, 4, 4, BITS, T>(args, split, stream);
        case 1: return launch_tile<128, 128, 2, 4, 3, BITS, T, 2>(args, split, stream);
        case 2: return launch_tile<64, 128, 1, 4, 4, BITS, T>(args, split, stream);
        case 3: return launch_tile<32, 128, 1, 4, 6, BITS, T>(args, split, stream);
        case 4: return launch_wgmma<64, 6, BITS, T>(args, split, stream);
        case 5: return launch_wgmma<128, 4, BITS, T, 2, 2>(args, split, stream);
        case 6: return launch_wgmma<64, 6, BITS, T, 1>(args, split, stream);
        case 7: return launch_wgmma_ws_pieces<256, 1, 5, BITS, T>(args, plan, workspace, stream);
        case 8: return launch_wgmma_ws_pieces<128, 2, 6, BITS, T>(args, plan, workspace, stream);
        case 9: return launch_wgmma_ws_pieces<64, 1, 8, BITS, T, 2>(args, plan, workspace, stream);
        case 10: return launch_wgmma_ws<256, 1, 5, BITS, T, 2>(args, plan, workspace, stream);
        case 11: return launch_balanced<144, 6, 1, BITS, T>(args, plan, workspace, stream);
        case 12: return launch_balanced<160, 6, 1, BITS, T>(args, plan, workspace, stream);
        case 13: return launch_balanced<176, 6, 1, BITS, T>(args, plan, workspace, stream);
        case 14: return launch_balanced<192, 6, 1, BITS, T>(args, plan, workspace, stream);
        case 15: return launch_balanced<224, 6, 1, BITS, T>(args, plan, workspace, stream);
        case 16: return launch_balanced<256, 5, 2, BITS, T>(args, plan, workspace, stream);
        case 17: return launch_balanced<144, 6, 1, BITS, T, 2>(args, plan, workspace, stream);
        case 18: return launch_balanced<160, 6, 1, BITS, T, 2>(args, plan, workspace, stream);
        case 19: return launch_balanced<176, 6, 1, BITS, T, 2>(args, plan, workspace, stream);
        case 20: return launch_balanced<192, 6, 1, BITS, T, 2>(args, plan, workspace, stream);
        case 21: return launch_balanced<224, 6, 1, BITS, T, 2>(args, plan, workspace, stream);
        default: return TRT_WOQ_ERR_INVALID_ARGUMENT;
    }
}

template <typename T>
trt_woq_status launch_reduce(const trt_woq_linear_params& p, int split, cudaStream_t stream) {
    const int64_t pairs = p.m * p.n / 2;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((pairs + threads - 1) / threads, 65535));
    return launch_ex(gemm_splitk_reduce<T>, dim3(blocks), dim3(threads), 0, 1, false, stream,
                     static_cast<const float*>(p.workspace), static_cast<const T*>(p.bias), static_cast<T*>(p.output),
                     static_cast<int>(p.m), static_cast<int>(p.n), split, epilogue_of(p));
}

bool aligned(const void* ptr, size_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; }

}  // namespace

size_t workspace(int id, const trt_woq_linear_params* p, int sm) {
    if (supports(id, p, sm) != TRT_WOQ_OK) return 0;
    return workspace_bytes(id, *p);
}

namespace {

// The cost model of the SM90 dispatch for M > 128, in microseconds of an H100 under full load, fitted to the
// candidate sweep (tests/device/sweep_gemm.py; docs/kernels_gemm.md gives the figures): one CTA's K tile of T tokens
// x 128 channels costs `ktile + token x T` (measured per wave of whole tiles: 0.58 us at T = 144, 0.79 us at 256,
// INT4 and INT8 alike), FP6 `fp6_ktile` more (its conversion: 4-7 % slower than INT4 on the same tile); a launch
// whose CTAs share tiles pays `shared` once (the counters' memset, the waits) and `partial` per 256 tokens of each
// partial a tile's last CTA sums.
struct CostModel {
    double ktile, fp6_ktile, token, shared, partial;
};
constexpr CostModel kCost{0.30, 0.035, 0.0019, 4.0, 3.0};

double ws_cost(const Plan& plan, const trt_woq_linear_params& p) {
    const TileConfig& t = kTiles[plan.tile];
    const double fp6 = p.weight_format == TRT_WOQ_WEIGHT_FP6_E3M2 ? kCost.fp6_ktile : 0.0;
    const double tile_k = kCost.ktile + fp6 + kCost.token * t.bm, wave = double(ws_wave(t)), k_tiles = double(p.k / kBK);
    if (plan.split < 2) return std::ceil(plan.tiles / wave) * k_tiles * tile_k;
    return plan.dp_tiles / wave * k_tiles * tile_k + plan.k_tiles_per_split * tile_k + kCost.shared +
           kCost.partial * t.bm / 256.0 * plan.split;
}

// M > 128 on SM90: the 128-channel warp-specialized tile of T = 144, 160, 176, 192, 224 or 256 tokens and the variant
// (whole tiles, tail split, stream-K) of the lowest modelled cost. T sets the padding (ceil(M / T) tiles of T tokens)
// and the cost per token (each weight is converted once per tile); the variant, the last wave's fill. For a problem
// that passed check_problem on SM90 these candidates are supported exactly when they split (the ws tiles fit SM90's
// shared memory), which the plan says without supports()' other checks. The DEPTH 2 tile is a tactic only.
int balanced_pick(const trt_woq_linear_params& p) {
    int best = -1;
    double best_cost = 0;
    for (int tile = kFirstWsTile; tile < kNumTiles; tile = tile == kFirstWsTile ? kFirstBalancedTile : tile + 1) {
        if (kTiles[tile].depth != 1 || kTiles[tile].cluster != 1) continue;
        for (Variant v : {kWhole, kSplit, kStreamK}) {
            const int id = candidate_id(tile, v);
            const Plan plan = make_plan(id, p);
            if (v != kWhole && plan.split < 2) continue;
            const double cost = ws_cost(plan, p);
            if (best < 0 || cost < best_cost) best = id, best_cost = cost;
        }
    }
    return best;
}

}  // namespace

int heuristic(const trt_woq_linear_params* params, int sm) {
    if (check_problem(params) != TRT_WOQ_OK || sm < 80) return -1;
    // Tile by M (measured on H100, docs/kernels_gemm.md): small M is bound by the weight stream, large M by the
    // tensor cores. Then the split-K variant when the tiles alone would leave most SMs idle.
    const int64_t m = params->m;
    if (sm == 90 && m > 128) return balanced_pick(*params);
    if (sm == 90) {
        // Hopper, M <= 128 (H100 sweeps, docs/kernels_gemm.md). The warp-specialized tile: 64 x 128 in clusters of
        // 2 for M <= 64, else 128 x 256. Then the variant:
        //  * the tail split whenever there are whole waves too; alone (every tile split) only up to 4 slices: the
        //    last slice sums the others' partials serially, and with 8 slices split-K + reduce measured faster;
        //  * stream-K (INT4) for the clustered 64-token tile over a last wave at least half full after whole waves
        //    (not within one wave, where it was slower);
        //  * whole tiles when they fill at least half a wave (the clustered 64-token tile: INT4 within one wave
        //    only);
        //  * else the 64 x 128 (M <= 64) or the 2-CTA/SM 128 x 128 wgmma tile with split-K.
        // FP6 (a 4-bit line plus its 2-bit words) follows INT4's rules; not swept on its own.
        const bool int4 =
            params->weight_format == TRT_WOQ_WEIGHT_INT4 || params->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2;
        const int ws = m <= 64 ? 9 : 8;
        const Plan tail = make_plan(2 * ws + 1, *params);
        if (supports(2 * ws + 1, params, sm) == TRT_WOQ_OK && (tail.dp_tiles > 0 || tail.split <= kMaxTailSplitAlone))
            return 2 * ws + 1;
        const int64_t wave = ws_wave(kTiles[ws]);
        const int streamk = candidate_id(ws, kStreamK);
        const bool streamk_fits = ws == 9 && tail.tiles > wave && 2 * (tail.tiles % wave) >= wave;
        if (int4 && streamk_fits && supports(streamk, params, sm) == TRT_WOQ_OK) return streamk;
        const bool whole_ok = ws != 9 || (int4 && tail.tiles <= wave);
        if (2 * tail.tiles >= wave && whole_ok && supports(2 * ws, params, sm) == TRT_WOQ_OK) return 2 * ws;
        const int tile = m <= 64 ? 4 : 5;
        if (supports(2 * tile + 1, params, sm) == TRT_WOQ_OK) return 2 * tile + 1;
        if (supports(2 * tile, params, sm) == TRT_WOQ_OK) return 2 * tile;
    }
    int tile = m <= 32 ? 3 : (m <= 256 ? 2 : 0);
    if (tile == 0 && supports(0, params, sm) != TRT_WOQ_OK) tile = 1;  // 4 stages do not fit (SM86/SM89 INT8)
    if (tile == 2 && m > 128) {
        // Prefer 128-row tiles when they still give at least a wave of CTAs.
        const int64_t tiles128 = int64_t(ceil_div(m, 128)) * ceil_div(params->n, 128);
        if (tiles128 >= kSms) tile = supports(0, params, sm) == TRT_WOQ_OK ? 0 : 1;
    }
    const int split_id = 2 * tile + 1;
    if (supports(split_id, params, sm) == TRT_WOQ_OK) return split_id;
    return supports(2 * tile, params, sm) == TRT_WOQ_OK ? 2 * tile : -1;
}

trt_woq_status launch(int id, const trt_woq_linear_params* p, cudaStream_t s) {
    if (!aligned(p->scales, 4) || !aligned(p->output, 4) || (p->zeros && !aligned(p->zeros, 4)) ||
        (p->bias && !aligned(p->bias, 2)))
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    const Plan plan = make_plan(id, *p);
    const size_t ws = workspace_bytes(id, *p);
    if (ws > 0 && (p->workspace == nullptr || p->workspace_size < ws || !aligned(p->workspace, 8)))
        return TRT_WOQ_ERR_WORKSPACE;

    GemmArgs args;
    args.a = p->activation;
    args.b = static_cast<const int32_t*>(p->packed_weight);
    args.scales = p->scales;
    args.zeros = p->zeros;
    args.bias = p->bias;
    args.c = p->output;
    const bool ws_kernel = kTiles[plan.tile].kernel == Kernel::kWgmmaWs;  // sums its own slices
    args.partials = plan.split > 1 && !ws_kernel ? static_cast<float*>(p->workspace) : nullptr;
    args.m = static_cast<int>(p->m);
    args.n = static_cast<int>(p->n);
    args.k = static_cast<int>(p->k);
    args.group = p->group_size == -1 ? static_cast<int>(p->k) : p->group_size;
    args.group_shift = 31;
    if (p->group_size != -1)
        for (args.group_shift = 0; (1 << args.group_shift) < p->group_size; ++args.group_shift) {
        }
    args.k_tiles_per_split = plan.k_tiles_per_split;
    args.ep = epilogue_of(*p);

    trt_woq_status r;
    const bool bf16 = p->act_type == TRT_WOQ_ACT_BF16;
    if (p->weight_format == TRT_WOQ_WEIGHT_INT4)
        r = bf16 ? launch_bits_type<4, __nv_bfloat16>(plan, args, p->workspace, s)
                 : launch_bits_type<4, half>(plan, args, p->workspace, s);
    else if (p->weight_format == TRT_WOQ_WEIGHT_FP6_E3M2)
        r = bf16 ? launch_bits_type<6, __nv_bfloat16>(plan, args, p->workspace, s)
                 : launch_bits_type<6, half>(plan, args, p->workspace, s);
    else
        r = bf16 ? launch_bits_type<8, __nv_bfloat16>(plan, args, p->workspace, s)
                 : launch_bits_type<8, half>(plan, args, p->workspace, s);
    if (r != TRT_WOQ_OK || plan.split < 2 || ws_kernel) return r;
    return bf16 ? launch_reduce<__nv_bfloat16>(*p, plan.split, s) : launch_reduce<half>(*p, plan.split, s);
}

const char* candidate_name(int id) {
    static const std::array<std::string, kNumCandidates> names = [] {
        std::array<std::string, kNumCandidates> n;
        for (int i = 0; i < kNumCandidates; ++i) {
            const Variant v = variant_of(i);
            const char* split = kTiles[tile_of(i)].kernel == Kernel::kWgmmaWs ? "_tailsplit" : "_splitk";
            n[i] = std::string("gemm_") + kTiles[tile_of(i)].name + (v == kWhole ? "" : (v == kSplit ? split : "_streamk"));
        }
        return n;
    }();
    return names[id].c_str();
}

}  // namespace gemm
}  // namespace trt_woq
