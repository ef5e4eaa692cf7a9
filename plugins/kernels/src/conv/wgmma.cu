/*
 * Host side of candidate `conv_wgmma` (wgmma.cuh: the TMA im2col implicit GEMM on the warp-specialized wgmma
 * kernel): checks, the tile plan, the workspace, the launch.
 *
 * Launch: an NCHW activation is first transposed to channels-last into the workspace (transpose.cuh), the same
 * kernel zeroing the stream-K counters (on a channels-last input clear_kernel does that alone); the conv kernel is
 * launched as a programmatic dependent of it (its first activation load waits for it: ConvIo::load), so its launch
 * and prologue overlap that kernel. The kernel writes the NCHW output with bias and epilogue (store_mode).
 * Workspace: [NHWC copy of an NCHW input] [stream-K partials] [their counters], each rounded up to 256 bytes.
 * Plan: the token tile (auto_tile: 128 or 256 pixels x 128 channels; the tactics force one of 64 in clusters of 2,
 * 128, 256), then whole tiles, or the full waves whole and the last partial wave's K tiles shared by a wave of CTAs
 * (stream-K, equal shares of at least 4 K tiles and 1/16 of K): on 128-pixel tiles the smallest such share that
 * keeps the sharing CTAs in one wave, on 256-pixel tiles whichever the GEMM's cost model (gemm.cu's CostModel, not
 * refitted to convs) rates lower (best_plan).
 */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled / Im2col

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "conv/implicit.h"
#include "conv/transpose.cuh"
#include "conv/wgmma.cuh"

namespace trt_woq {
namespace conv_wgmma {
namespace {

constexpr int kSms = 132;  // a fixed figure keeps the workspace a function of the problem (the C ABI's rule)
constexpr int kMaxSplit = 16, kMinShare = 4;
constexpr size_t kAlign = 256;

size_t round_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t gcd(int64_t a, int64_t b) { return b == 0 ? a : gcd(b, a % b); }

struct Plan {
    int tile;
    int m_tiles, n_units;
    int64_t dp, shared_ctas;  // units computed whole; CTA units sharing the rest
    int share, slot_period;   // K tiles per sharing CTA; partial slot period (WsSchedule)
    double cost;              // modelled microseconds
};

/* Tile `t` with whole tiles (split 1) or the tail shared in `split` pieces per tile; split 0: the tail shared by a
 * whole wave (the smallest share, of at least kMinShare K tiles and 1 / kMaxSplit of K, that keeps the sharing CTAs
 * in one wave). */
Plan make_plan(int t, const trt_woq_linear_params& p, int split) {
    const TileShape& s = kTiles[t];
    const int k_tiles = static_cast<int>(p.k / gemm::kBK);
    Plan plan{t, static_cast<int>(ceil_div(p.m, s.tok)), static_cast<int>(ceil_div(ceil_div(p.n, kChannels), s.cluster)),
              0, 0, k_tiles, 1, 0.0};
    const int64_t units = int64_t(plan.m_tiles) * plan.n_units;
    const int64_t wave = int64_t(kSms) * gemm::ws_ctas_per_sm(s.tok) / s.cluster;
    // gemm.cu's CostModel: one K tile of T tokens x 128 channels per wave, shared-tile overhead, partial sums. The
    // 64-token pair (two CTAs per SM, each converting its own 128 channels' weights) is not in that fit: 2 x 0.30.
    const double tile_k = s.cluster > 1 ? 0.60 : 0.30 + 0.0019 * s.tok;
    plan.dp = units;
    plan.cost = double(ceil_div(units, wave)) * k_tiles * tile_k;
    if (split == 1) return plan;
    const int64_t dp = units / wave * wave, tail = units - dp;
    const int share = static_cast<int>(
        split > 1 ? ceil_div(k_tiles, split)
                  : std::max({ceil_div(tail * k_tiles, wave), int64_t(kMinShare), ceil_div(k_tiles, kMaxSplit)}));
    if (tail == 0 || share < kMinShare || share >= k_tiles || share < ceil_div(tail * k_tiles, wave) ||
        tail * k_tiles >= INT32_MAX) {
        plan.cost = -1;  // not a plan
        return plan;
    }
    plan.dp = dp;
    plan.share = share;
    plan.shared_ctas = ceil_div(tail * k_tiles, share);
    plan.slot_period = static_cast<int>(k_tiles / gcd(share, k_tiles));
    plan.cost = double(dp / wave) * k_tiles * tile_k + share * tile_k + 4.0 + 3.0 * s.tok / 256.0 * split;
    return plan;
}

/* The token tile of the dispatch (H100, python -m trt_woq.bench_conv's tile columns, docs/kernels.md): 256 pixels
 * once that gives at least 16 tiles, else 128. The 64-pixel pair never measured fastest by more than 2 %. */
int auto_tile(const trt_woq_linear_params& p) {
    return ceil_div(p.m, kTiles[2].tok) * ceil_div(p.n, kChannels) >= 16 ? 2 : 1;
}

/* What a launch runs: the token tile (-1: auto_tile); the plan (kPlanModel: the cost model's, kPlanFill: the tail
 * shared by a whole wave where that is a plan, -1: the dispatch's, fill on the 128-pixel tile); the store
 * (ConvIo::store_mode; -1: store_mode()'s choice). */
struct Options {
    int tile, plan, store;
};

/* The plan of `o` (python -m trt_woq.bench_conv's wgfill column against wgmodel, H100, docs/kernels.md: sharing
 * the tail over a whole wave measured faster on 7 of 9 convs with 128-pixel tiles, 1.4-20 %, where the cost model
 * (fitted to GEMMs) leaves SMs idle, e.g. 90 of 132 CTAs on 2 x 1280 8x8, 26 on 8 x 1024 1x1, and 1.5-4 % slower on
 * two (8 x 256 14x14, 1 x 512 7x7); 0.4-2 % slower on the three with 256-pixel tiles, whose partial sums are twice
 * as large). */
Plan best_plan(const trt_woq_linear_params& p, const Options& o) {
    const int t = o.tile >= 0 ? o.tile : auto_tile(p);
    if (o.plan == kPlanFill || (o.plan < 0 && kTiles[t].tok == 128)) {
        const Plan f = make_plan(t, p, 0);
        if (f.cost >= 0 && f.shared_ctas > 0) return f;
    }
    Plan best = make_plan(t, p, 1);
    for (int split = 2; split <= kMaxSplit; ++split) {
        const Plan c = make_plan(t, p, split);
        if (c.cost >= 0 && c.cost < best.cost) best = c;
    }
    return best;
}

int64_t partial_slots(const Plan& plan) {
    if (plan.shared_ctas == 0) return 0;
    const int64_t last = plan.shared_ctas - 1;  // the last sharing CTA never stores one, nor those ending a tile
    return last - last / plan.slot_period;
}

struct Layout {
    size_t partials, flags, total;  // byte offsets of the parts after the NHWC copy (at 0), total size
};
Layout layout_of(const trt_woq_linear_params& p, const Plan& plan) {
    const trt_woq_conv_geometry& g = p.conv;
    const TileShape& s = kTiles[plan.tile];
    Layout l{};
    l.partials = g.activation_nhwc ? 0 : round_up(size_t(g.batch) * g.in_channels * g.in_h * g.in_w * 2);
    l.flags = l.partials + round_up(size_t(partial_slots(plan)) * s.cluster * s.tok * kChannels * sizeof(float));
    l.total = l.flags + round_up(size_t(plan.m_tiles * int64_t(plan.n_units) - plan.dp) * s.cluster * sizeof(unsigned));
    return l;
}

/* The driver's tensor-map encoders through the runtime (the library does not link libcuda). */
template <typename Fn>
Fn driver_entry(const char* name) {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return nullptr;
    return reinterpret_cast<Fn>(f);
}

/* The im2col map of the NHWC input: dims {C, W, H, B}, box 64 channels x `pixels`, the conv's stride as traversal
 * stride, bounding box [-pad, size + pad_end - d (k - 1) - 1] (corners as offsets from the tensor's edges, W first),
 * 128-byte swizzle, zero fill. */
bool encode_im2col(CUtensorMap* map, const trt_woq_conv_geometry& g, bool bf16, const void* x, int pixels) {
    static const auto encode = driver_entry<PFN_cuTensorMapEncodeIm2col_v12000>("cuTensorMapEncodeIm2col");
    if (encode == nullptr) return false;
    const cuuint64_t dims[4] = {cuuint64_t(g.in_channels), cuuint64_t(g.in_w), cuuint64_t(g.in_h),
                                cuuint64_t(g.batch)};
    const cuuint64_t strides[3] = {dims[0] * 2, dims[0] * dims[1] * 2, dims[0] * dims[1] * dims[2] * 2};
    const int lower[2] = {-g.pad_left, -g.pad_top};
    const int upper[2] = {g.pad_right - g.dilation_w * (g.kernel_w - 1), g.pad_bottom - g.dilation_h * (g.kernel_h - 1)};
    const cuuint32_t elem_strides[4] = {1, cuuint32_t(g.stride_w), cuuint32_t(g.stride_h), 1};
    return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                  const_cast<void*>(x), dims, strides, lower, upper, gemm::kBK, cuuint32_t(pixels), elem_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The packed weights as the GEMM loads them: [N / I lines, K / 2 words], box one 128-byte line x 128 / I lines. */
bool encode_weights(CUtensorMap* map, const trt_woq_linear_params& p, int inter) {
    static const auto encode = driver_entry<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled");
    if (encode == nullptr) return false;
    const cuuint64_t dims[2] = {cuuint64_t(p.k / 2), cuuint64_t(p.n / inter)};
    const cuuint64_t strides[1] = {cuuint64_t(p.k / 2) * 4};
    const cuuint32_t box[2] = {gemm::kBK / 2, cuuint32_t(kChannels / inter)}, elem_strides[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_INT32, 2, const_cast<void*>(p.packed_weight), dims, strides, box,
                  elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool aligned(const void* ptr, size_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; }

/* ConvIo::store_mode for `asked` (-1: the dispatch's choice; bench_conv's wgmodel, wgmma_quads and wgmma_scalar
 * columns, H100, docs/kernels.md): the lane pairs where the image is a multiple of 16 pixels (and the output 32-byte
 * aligned), except with an activation of no transcendental (none, ReLU, Clip) on 256-pixel tiles, where the quads'
 * whole-line stores measured up to 8 % faster (8 x 256 56x56) and the pairs' 16 outputs in flight buy nothing; the
 * quads elsewhere. kStoreWidest: the pairs wherever they fit. */
int store_mode(const trt_woq_linear_params& p, int tok, int asked) {
    if (asked == kStoreQuads || asked == kStoreScalar) return asked;
    const bool transcendental = p.epilogue == TRT_WOQ_EPILOGUE_SILU || p.epilogue == TRT_WOQ_EPILOGUE_GELU_ERF ||
                                p.epilogue == TRT_WOQ_EPILOGUE_GELU_TANH;
    const bool pairs = (p.conv.out_h * p.conv.out_w) % 16 == 0 && aligned(p.output, 32);
    return pairs && (asked == kStoreWidest || transcendental || tok < 256) ? kStorePairs : kStoreQuads;
}

/* The stream-K counters alone (conv_wgmma on a channels-last input), letting the conv kernel start at once. */
__global__ void clear_kernel(unsigned int* counters, int n) { pdl_launch_dependents_clearing(counters, n); }

template <typename T>
trt_woq_status launch_typed(const trt_woq_linear_params* p, Options o, cudaStream_t stream) {
    const trt_woq_conv_geometry& g = p->conv;
    const Plan plan = best_plan(*p, o);
    const Layout lay = layout_of(*p, plan);
    char* ws = static_cast<char*>(p->workspace);
    if (lay.total > 0 && (ws == nullptr || p->workspace_size < lay.total || !aligned(ws, 16)))
        return TRT_WOQ_ERR_WORKSPACE;
    if (!aligned(p->packed_weight, 16) || !aligned(p->activation, 16) || !aligned(p->scales, 4) ||
        (p->zeros != nullptr && !aligned(p->zeros, 4)) || (p->bias != nullptr && !aligned(p->bias, 2)))
        return TRT_WOQ_ERR_INVALID_ARGUMENT;
    const TileShape& s = kTiles[plan.tile];
    // The shared tiles' counters start at zero in every launch.
    unsigned int* counters = reinterpret_cast<unsigned int*>(ws + lay.flags);
    const int n_counters = static_cast<int>((plan.m_tiles * int64_t(plan.n_units) - plan.dp) * s.cluster);
    const void* x = p->activation;
    Launch l{};
    if (!g.activation_nhwc) {
        const trt_woq_status st = conv::transpose(static_cast<const T*>(x), reinterpret_cast<T*>(ws), g.batch,
                                                  g.in_channels, g.in_h * g.in_w, stream, counters, n_counters);
        if (st != TRT_WOQ_OK) return st;
        x = ws;
        l.programmatic = true;
    } else if (n_counters > 0) {
        clear_kernel<<<1, 256, 0, stream>>>(counters, n_counters);
        const trt_woq_status st = check_launch();
        if (st != TRT_WOQ_OK) return st;
        l.programmatic = true;
    }
    const bool int8 = p->weight_format == TRT_WOQ_WEIGHT_INT8;
    l.tile = plan.tile;
    l.ctas = static_cast<int>((plan.dp + plan.shared_ctas) * s.cluster);
    if (!encode_im2col(&l.tmap_x, g, p->act_type == TRT_WOQ_ACT_BF16, x, s.tok / s.cluster) ||
        !encode_weights(&l.tmap_w, *p, int8 ? 2 : 4))
        return record_cuda_error(cudaErrorInvalidValue);
    l.io = {g.in_channels, g.kernel_w,   g.out_w,      g.out_h * g.out_w, g.stride_h,
            g.stride_w,    g.pad_top,    g.pad_left,   g.dilation_h,      g.dilation_w,
            store_mode(*p, s.tok, o.store)};
    gemm::GemmArgs& a = l.args;
    a.a = x;
    a.b = static_cast<const int32_t*>(p->packed_weight);
    a.scales = p->scales;
    a.zeros = p->zeros;
    a.bias = p->bias;
    a.c = p->output;
    a.partials = nullptr;
    a.m = static_cast<int>(p->m);
    a.n = static_cast<int>(p->n);
    a.k = static_cast<int>(p->k);
    a.group = p->group_size == -1 ? a.k : p->group_size;
    a.group_shift = 31;
    if (p->group_size != -1)
        for (a.group_shift = 0; (1 << a.group_shift) < p->group_size; ++a.group_shift) {
        }
    a.k_tiles_per_split = plan.share;
    a.ep = epilogue_of(*p);
    l.sched = {plan.m_tiles, plan.n_units, static_cast<int>(plan.dp), plan.share, static_cast<int>(p->k / gemm::kBK),
               plan.slot_period, reinterpret_cast<float*>(ws + lay.partials),
               reinterpret_cast<unsigned int*>(ws + lay.flags)};
    const bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    return int8 ? (bf16 ? launch_i8_bf16(l, stream) : launch_i8_f16(l, stream))
                : (bf16 ? launch_i4_bf16(l, stream) : launch_i4_f16(l, stream));
}

bool in_byte(int v) { return v >= -128 && v <= 127; }

trt_woq_status launch_plan(const trt_woq_linear_params* p, Options o, cudaStream_t stream) {
    return p->act_type == TRT_WOQ_ACT_BF16 ? launch_typed<__nv_bfloat16>(p, o, stream)
                                           : launch_typed<half>(p, o, stream);
}

}  // namespace

trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_conv_geometry& g = p->conv;
    if (!conv_implicit::order_is(g, TRT_WOQ_CONV_K_IJC)) return TRT_WOQ_ERR_UNSUPPORTED_OPTION;
    if (sm != 90) return TRT_WOQ_ERR_UNSUPPORTED_ARCH;  // wgmma: sm_90a
    const int g_size = p->group_size;
    const bool group_ok = g_size == -1 || ((g_size == 32 || g_size == 64 || g_size == 128 || g_size == 256) &&
                                           p->k % g_size == 0);
    // One K tile = 64 channels of one tap; the im2col map's limits (corners within a signed byte for a 4-D tensor,
    // traversal strides up to 8); the transpose's grid; int indices in the kernel.
    const bool fits = g.in_channels % gemm::kBK == 0 && p->n % (p->weight_format == TRT_WOQ_WEIGHT_INT8 ? 2 : 4) == 0 &&
                      in_byte(-g.pad_left) && in_byte(-g.pad_top) &&
                      in_byte(g.pad_right - g.dilation_w * (g.kernel_w - 1)) &&
                      in_byte(g.pad_bottom - g.dilation_h * (g.kernel_h - 1)) && g.stride_h <= 8 && g.stride_w <= 8 &&
                      g.batch <= 65535 && p->m < (int64_t(1) << 31) && p->n < (int64_t(1) << 31) && p->k < (int64_t(1) << 31);
    return group_ok && fits ? TRT_WOQ_OK : TRT_WOQ_ERR_UNSUPPORTED_SHAPE;
}

/* Above conv_implicit_cl (3), conv_implicit (2) and conv_im2col (1) where it measured faster (H100, python -m
 * trt_woq.bench_conv, docs/kernels.md): from 128 output pixels on with M N K >= 2^28. Below that its fixed costs
 * (the transpose, a K split summed by one CTA per tile) lose to conv_implicit_cl. A 1 x 1 kernel on an NCHW input
 * (conv_implicit needs no transpose) from 1024 pixels on (8 x 1024 -> 256 14x14: 18.8 us against 21.6; at 196
 * pixels 15.4 against 9.6). */
int32_t score(const trt_woq_linear_params* p, int32_t) {
    const trt_woq_conv_geometry& g = p->conv;
    const bool big = double(p->m) * double(p->n) * double(p->k) >= double(1 << 28);
    if (g.kernel_h * g.kernel_w == 1 && !g.activation_nhwc) return p->m >= 1024 && big ? 5 : 0;
    return p->m >= 128 && big ? 5 : 0;
}

template <int TILE, int PLAN, int STORE>
size_t workspace_as(const trt_woq_linear_params* p, int32_t) {
    return layout_of(*p, best_plan(*p, Options{TILE, PLAN, STORE})).total;
}
template <int TILE, int PLAN, int STORE>
trt_woq_status launch_as(const trt_woq_linear_params* p, cudaStream_t stream) {
    return launch_plan(p, Options{TILE, PLAN, STORE}, stream);
}
#define TRT_WOQ_CONV_WGMMA_AS(TILE, PLAN, STORE)                                              \
    template size_t workspace_as<TILE, PLAN, STORE>(const trt_woq_linear_params*, int32_t); \
    template trt_woq_status launch_as<TILE, PLAN, STORE>(const trt_woq_linear_params*, cudaStream_t);
TRT_WOQ_CONV_WGMMA_AS(-1, -1, -1)
TRT_WOQ_CONV_WGMMA_AS(0, kPlanModel, -1)
TRT_WOQ_CONV_WGMMA_AS(1, kPlanModel, -1)
TRT_WOQ_CONV_WGMMA_AS(2, kPlanModel, -1)
TRT_WOQ_CONV_WGMMA_AS(-1, kPlanModel, kStoreWidest)
TRT_WOQ_CONV_WGMMA_AS(-1, kPlanFill, kStoreWidest)
TRT_WOQ_CONV_WGMMA_AS(-1, kPlanModel, kStoreQuads)
TRT_WOQ_CONV_WGMMA_AS(-1, kPlanModel, kStoreScalar)
#undef TRT_WOQ_CONV_WGMMA_AS

int32_t score_tactic(const trt_woq_linear_params*, int32_t) { return -1; }

}  // namespace conv_wgmma
}  // namespace trt_woq
