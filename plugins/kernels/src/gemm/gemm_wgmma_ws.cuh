// Hopper (SM90a) warp-specialized weight-only GEMM: TMA + mbarrier pipeline, one producer warp, two consumer
// warpgroups on wgmma with the dequantized weights as the register operand (the product is Y^T = W^T X^T as in
// gemm_wgmma.cuh, whose fragment mapping this kernel shares).
//
// Why: the non-specialized kernel (gemm_wgmma.cuh) has every thread issue cp.async and meet at a __syncthreads per
// K tile, so the tensor pipe idles while all warps copy and wait (ncu: 54 % tensor pipe at M = 4096). Here:
//   * warp 0 (one elected lane) loads the activation tile [TOK tokens x 64 k] and the packed weight lines
//     [CH / I lines x 128 B] with cp.async.bulk.tensor (TMA), both with the 128-byte swizzle (16-byte chunk c of
//     row r at c ^ (r % 8)): for the activations that is the K-major layout wgmma's shared-memory descriptor reads;
//     for the packed lines it spreads the 8 channels a warp reads per k16 step over 32 banks (INT4: 2 lines x 4
//     channels, INT8: 4 lines x 2). Rows beyond M and lines beyond N / I are zero-filled by TMA. The lanes of the
//     same warp copy the scale / zero rows with 4-byte cp.async (their rows need only 4-byte alignment); the
//     hardware arrives for each lane on the same "full" mbarrier once its copies are complete
//     (cp.async.mbarrier.arrive), so the warp never waits for them. Layout v1 in global memory is unchanged.
//   * consumer warpgroup c owns CH / 2 channels (one or two m64 row blocks): it converts tile i + 1 into the second
//     fragment buffer while the wgmma group of tile i runs, and releases a stage to the producer ("empty" mbarrier,
//     one arrival per consumer thread) once the wgmma group that read it has completed. setmaxnreg moves registers
//     from the producer warpgroup to the consumers (128 accumulator registers per thread at TOK = 256).
//   * epilogue: the accumulators go through shared memory (the pipeline buffers are free by then) so the output
//     rows are written with 16-byte stores along N.
//   * CLUSTER = 2 (the 64-token tile, M <= 64; the balanced tiles, M > 128): the two CTAs of a cluster take
//     neighbouring N tiles of the same tokens and each loads half of the activation tile with a multicast TMA into
//     both: the activation, 2/3 of a 128-channel CTA's inbound bytes at 64 tokens (over 80 % at 176) and re-read
//     from L2 by every CTA, is read once per pair. Each stage is then freed only when the consumers of both CTAs
//     released it (each consumer thread arrives on both CTAs' "empty" barriers), and a producer waits for its last
//     stages' releases before exiting, so no CTA exits while its peer may still arrive on its barriers.
//   * schedule (WsSchedule): a 1D grid; the first dp_tiles CTAs each compute one whole output tile (full waves), the
//     CTAs after them share the K iterations of the remaining tiles (the last partial wave), `share` iterations each,
//     in tile-major order over a per-tile iteration space of `tile_iters` (>= K; iterations past K are empty). Why:
//     one CTA per SM, so e.g. 192 tiles on 132 SMs take two tile-times with the second wave half empty; splitting the
//     last 60 tiles in two makes it 1.5. (Spreading the last 92 of 224 tiles over a wave measured no faster, why is
//     open: docs/kernels_gemm.md.) Two plans: the tail split (tile_iters = split x share, each CTA one K slice of one
//     tile) and stream-K (tile_iters = K, shares balanced over a wave, so a CTA may cross a tile boundary). share <=
//     tile_iters, so a CTA touches at most two tiles: it computes the later tile's head first and stores it as an
//     FP32 partial (coalesced, in register order) and bumps that tile's counter; then the earlier tile's tail, whose
//     CTA (the highest index of the tile: its partners were launched before it, so they are resident or done) waits
//     for the counter, adds the partials in CTA order (deterministic) and runs the normal epilogue. No reduce kernel;
//     the smem epilogue is always a CTA's last piece of work.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: the driver's encoder is reached through the runtime, libcuda is not linked)

#include "../pdl.cuh"
#include "gemm_wgmma.cuh"

namespace trt_woq {
namespace gemm {

constexpr int kWsConsumers = 2;                      // consumer warpgroups
constexpr int kWsProducerRegs = 40, kWsConsumerRegs = 232;  // after setmaxnreg: 128 * 40 + 256 * 232 <= 64K
static_assert(128 * kWsProducerRegs + 128 * kWsConsumers * kWsConsumerRegs <= 65536, "register file");
// CTAs per SM: the 64-token tile (32 accumulators per thread) runs two, so that an SM has four consumer
// warpgroups to hide the latency of the weight stream; the larger tiles one.
__host__ __device__ constexpr int ws_ctas_per_sm(int tok) { return tok <= 64 ? 2 : 1; }
// Threads: one CTA per SM: a producer warpgroup (its warp 0 works; setmaxnreg moves the registers of the
// warpgroup to the consumers), then the consumer warpgroups. Two CTAs per SM: the consumer warpgroups, then a
// single producer warp (no setmaxnreg; 288 threads leave the consumers 112 registers, where 384 would leave 80
// and serialize the wgmma).
__host__ __device__ constexpr bool ws_reg_shift(int tok) { return ws_ctas_per_sm(tok) == 1; }
__host__ __device__ constexpr int ws_threads(int tok) {
    return ws_reg_shift(tok) ? (kWsConsumers + 1) * 128 : kWsConsumers * 128 + 32;
}

// Shared-memory geometry: `stages` x {activation tile, packed lines, scales, zeros}, each stage 1024-byte aligned
// (the 128-byte swizzle atom); the epilogue's FP32 staging tile [TOK][CH + 4] (padded against bank conflicts) reuses
// the same bytes; the 2 x `stages` mbarriers follow. `stages` is max_stages, or fewer where the CTAs per SM would
// not fit in the SM's 228 KB (the 2-CTA tile with INT8 weights). Plain constexpr functions, so the host sizes the
// launch with them.
struct WsGeometry {
    int stages, lines, x_bytes, w_bytes, s_bytes, stage_bytes, epi_pitch, epi_bytes, data_bytes, smem_bytes;
};
__host__ __device__ constexpr WsGeometry ws_geometry(int tok, int ch, int max_stages, int bits) {
    WsGeometry g{};
    g.lines = ch / (bits == 8 ? 2 : 4);
    g.x_bytes = tok * kBK * 2;
    g.w_bytes = g.lines * packed_line_bytes(bits);  // FP6: the 2-bit words after the 4-bit lines
    g.s_bytes = 2 * ch * 2;  // up to two group rows (group 32 < 64)
    g.stage_bytes = (g.x_bytes + g.w_bytes + 2 * g.s_bytes + 1023) / 1024 * 1024;
    g.epi_pitch = ch + 4;  // floats
    g.epi_bytes = tok * g.epi_pitch * 4;
    const int budget = 228 * 1024 / ws_ctas_per_sm(tok) - 1024;  // per CTA, less the 1 KB the system reserves
    for (g.stages = max_stages;; --g.stages) {  // down to 2 stages at least
        g.data_bytes = g.stages * g.stage_bytes > g.epi_bytes ? g.stages * g.stage_bytes : g.epi_bytes;
        g.smem_bytes = g.data_bytes + 2 * g.stages * 8 + 1024;  // + barriers + alignment slack
        if (g.smem_bytes <= budget || g.stages == 2) return g;
    }
}

// The launch's tile schedule (see above), in units of one cluster's tiles (CLUSTER neighbouring N tiles):
// units = m_tiles * n_units; the grid has CLUSTER * (dp_tiles + ceil((units - dp_tiles) * tile_iters / share))
// CTAs. partials: one [TOK * CH] FP32 slot per (CTA that stores a partial, rank); flags: one zeroed counter per
// (shared unit, rank) (gemm.cu's ws_clear_flags clears them before the launch). A shared CTA c stores a partial
// unless its share ends on a tile boundary, i.e. unless (c + 1) * share is a multiple of tile_iters, which happens
// every slot_period = tile_iters / gcd(share, tile_iters) CTAs: its slot is c - c / slot_period.
struct WsSchedule {
    int m_tiles, n_units, dp_tiles, share, tile_iters, slot_period;
    float* partials;
    unsigned int* flags;
};

// One CTA's piece of a tile: units [unit], K tiles [kt_begin, kt_end); slot >= 0: store the accumulators to that
// partial slot; else sum the `parts` partials from slot `first` on (none: a whole tile) and write the output.
struct WsPiece {
    int unit, kt_begin, kt_end, slot, first, parts;
};
// Shared CTA c's iterations [a, b) (the host keeps them below 2^31).
__device__ __forceinline__ void ws_share(const WsSchedule& s, int c, int& a, int& b) {
    a = c * s.share;
    b = min(a + s.share, (s.m_tiles * s.n_units - s.dp_tiles) * s.tile_iters);
}
// The number of pieces of CTA unit `unit`: one or (crossing a tile boundary) two.
__device__ __forceinline__ int ws_piece_count(const WsSchedule& s, int unit) {
    if (unit < s.dp_tiles) return 1;
    int a, b;
    ws_share(s, unit - s.dp_tiles, a, b);
    return (b - 1) / s.tile_iters != a / s.tile_iters ? 2 : 1;
}
// Piece q of CTA unit `unit`, in the order it computes them: a shared CTA first the later tile's head (a
// partial), then the earlier tile's tail. Recomputed where needed rather than kept in registers.
__device__ __forceinline__ WsPiece ws_piece(const WsSchedule& s, int unit, int k_tiles, int q) {
    if (unit < s.dp_tiles) return {unit, 0, k_tiles, -1, 0, 0};
    const int c = unit - s.dp_tiles;
    int a, b;
    ws_share(s, c, a, b);
    const int t = (q == 0 ? b - 1 : a) / s.tile_iters, t0 = t * s.tile_iters;
    WsPiece p{s.dp_tiles + t, min(max(a, t0) - t0, k_tiles), min(min(b, t0 + s.tile_iters) - t0, k_tiles), -1, 0, 0};
    if (b < t0 + s.tile_iters) {
        p.slot = c - c / s.slot_period;  // the tile's head or middle: a partial
    } else if (a > t0) {
        const int c_lo = t0 / s.share;  // the tile's tail: CTAs c_lo .. c - 1 stored its partials
        p.first = c_lo - c_lo / s.slot_period;
        p.parts = c - c_lo;
    }
    return p;
}

#ifdef TRT_WOQ_WGMMA
// mbarrier, TMA and register-reconfiguration wrappers (PTX ISA 8.0, sm_90).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
// The same box written to the same offset of every CTA of the cluster in `mask` (and complete_tx on each one's
// barrier at `bar`'s offset).
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, int inner, int outer,
                                                      uint32_t bar, uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
        "%3}], [%4], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar), "h"(mask)
        : "memory");
}
// An arrival on `bar` made by the hardware once this thread's earlier cp.async copies are complete (.noinc: it is
// one of the arrivals the barrier was initialised to expect).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Arrive on the barrier at the same offset in CTA `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int inner, int outer, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(bar)
        : "memory");
}
template <int REGS>
__device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
// Tail-split counters: release add by the slices that stored partials, acquire load by the slice that sums them.
__device__ __forceinline__ void flag_release_add(unsigned int* flag) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(flag) : "memory");
}
__device__ __forceinline__ unsigned int flag_acquire_load(const unsigned int* flag) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(flag) : "memory");
    return v;
}
// Barrier of the consumer warpgroups only (id 1; 0 is __syncthreads).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(kWsConsumers * 128) : "memory");
}
#endif

// Writes the staged FP32 tile epi[TOK][PITCH] (channels n0 .. n0 + CH) to rows m0 .. of Y with the bias added. V = 8
// contiguous channels per thread: one 16-byte store when N and the pointer allow it, else 2-channel stores (N is
// even).
template <int TOK, int CH, int PITCH, typename OutT>
__device__ __forceinline__ void store_rows(const float* epi, int ctid, int m0, int n0, const GemmArgs& args,
                                           OutT* out) {
    constexpr int V = 8;
    constexpr int kChunks = CH / V, kRowStep = kWsConsumers * 128 / kChunks;
    static_assert(kWsConsumers * 128 % kChunks == 0, "each thread keeps one chunk column");
    const int c = ctid % kChunks, n = n0 + c * V;
    if (n >= args.n) return;
    const bool whole = n + V <= args.n && args.n % V == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
    float bias[V];
#pragma unroll
    for (int v = 0; v < V; ++v) bias[v] = 0.f;
    const OutT* b = static_cast<const OutT*>(args.bias);
    if (b != nullptr)
#pragma unroll
        for (int v = 0; v < V; ++v)
            if (n + v < args.n) bias[v] = float(b[n + v]);
    visit_epilogue(args.ep, [&](auto kind) {
        for (int r = ctid / kChunks; r < TOK && m0 + r < args.m; r += kRowStep) {
            float x[V];
#pragma unroll
            for (int q = 0; q < V / 4; ++q) {
                const float4 f = *reinterpret_cast<const float4*>(epi + r * PITCH + c * V + 4 * q);
                x[4 * q] = f.x + bias[4 * q];
                x[4 * q + 1] = f.y + bias[4 * q + 1];
                x[4 * q + 2] = f.z + bias[4 * q + 2];
                x[4 * q + 3] = f.w + bias[4 * q + 3];
            }
#pragma unroll
            for (int v = 0; v < V; ++v) x[v] = apply_epilogue_kind<decltype(kind)::value>(x[v], args.ep);
            OutT* dst = out + (size_t)(m0 + r) * args.n + n;
            using T2 = typename Ops<OutT>::T2;
            uint32_t words[V / 2];
#pragma unroll
            for (int p = 0; p < V / 2; ++p) {
                T2 t;
                t.x = OutT(x[2 * p]);
                t.y = OutT(x[2 * p + 1]);
                words[p] = *reinterpret_cast<uint32_t*>(&t);
            }
            if (whole) {
                *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
            } else {
#pragma unroll
                for (int p = 0; p < V / 2; ++p)
                    if (n + 2 * p < args.n) *reinterpret_cast<uint32_t*>(dst + 2 * p) = words[p];
            }
        }
    });
}

// The kernel's input / output policy (its Io parameter): load() issues the TMA of the activation tile, K elements
// k0 .. k0 + 63 of rows row0 .. into `dst` (mask != 0: multicast to those CTAs of the cluster); store() writes the
// staged tile as store_rows. A conv replaces both: an im2col load and an NCHW store (src/conv/wgmma.cuh).
struct WsRowsIo {
    __device__ __forceinline__ void load(uint32_t dst, const CUtensorMap* map, int k0, int row0, uint32_t bar,
                                         uint16_t mask) const {
#ifdef TRT_WOQ_WGMMA
        if (mask != 0)
            tma_load_2d_multicast(dst, map, k0, row0, bar, mask);
        else
            tma_load_2d(dst, map, k0, row0, bar);
#endif
    }
    template <int TOK, int CH, int PITCH, typename OutT>
    __device__ __forceinline__ void store(const float* epi, int ctid, int m0, int n0, const GemmArgs& args,
                                          OutT* out) const {
        store_rows<TOK, CH, PITCH>(epi, ctid, m0, n0, args, out);
    }
};

// TOK tokens x CH = 2 x MT x 64 channels per CTA; up to MAX_STAGES pipeline stages (ws_geometry); CLUSTER CTAs
// share the activation tile; PIECES: 2 where a CTA may take two pieces (stream-K), else 1 (whole tiles and the
// tail split, whose code then stays that of a single piece: with the loop the 128 x 256 tile measured 15-20 %
// slower). FP6: tmap_w2 loads the 2-bit words [CH / 4 rows x 64 B], unswizzled, after the 4-bit lines. DEPTH:
// wgmma groups in flight while the next K tile converts (DEPTH + 1 fragment buffers; a stage goes back to the producer
// DEPTH tiles after its group was issued).
template <int TOK, int MT, int MAX_STAGES, int BITS, typename T, int CLUSTER, int PIECES, int DEPTH = 1,
          typename Io = WsRowsIo>
__global__ void __launch_bounds__(ws_threads(TOK), ws_ctas_per_sm(TOK))
    gemm_wgmma_ws_kernel(const GemmArgs args, const WsSchedule sched, const __grid_constant__ CUtensorMap tmap_x,
                         const __grid_constant__ CUtensorMap tmap_w, const __grid_constant__ CUtensorMap tmap_w2,
                         const Io io) {
#ifdef TRT_WOQ_WGMMA
    constexpr int kCH = kWsConsumers * MT * 64;
    constexpr WsGeometry L = ws_geometry(TOK, kCH, MAX_STAGES, BITS);
    constexpr int STAGES = L.stages;
    static_assert(L.x_bytes % 1024 == 0, "the weight lines must start 1024-byte aligned (swizzle atom)");
    static_assert(TOK <= 256 && L.lines <= 256, "TMA box dimensions are at most 256");
    using O = Ops<T>;
    constexpr int kI = BITS == 8 ? 2 : 4;

    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const uint32_t smem_base = smem_addr(smem);
    const uint32_t full_bar = smem_base + L.data_bytes, empty_bar = full_bar + STAGES * 8;
    auto stage_x = [&](int s) { return smem_base + s * L.stage_bytes; };
    auto stage_w = [&](int s) { return reinterpret_cast<const uint32_t*>(smem + s * L.stage_bytes + L.x_bytes); };
    auto stage_s = [&](int s) { return reinterpret_cast<T*>(smem + s * L.stage_bytes + L.x_bytes + L.w_bytes); };
    auto stage_z = [&](int s) {
        return reinterpret_cast<T*>(smem + s * L.stage_bytes + L.x_bytes + L.w_bytes + L.s_bytes);
    };

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    // This CTA's pieces of work (in cluster units; the cluster's CTA `rank` takes the rank-th N tile of its unit:
    // past N for the last unit of an odd count, where it only loads its half of the activations and stores nothing).
    const int unit = blockIdx.x / CLUSTER, rank = blockIdx.x % CLUSTER;
    const int k_tiles = args.k / kBK;
    // The CTAs of a cluster share the unit, so they take the same pieces and load the same K tiles (the multicast
    // needs that), one piece or two alike.
    const int n_pieces = PIECES == 1 ? 1 : ws_piece_count(sched, unit);
    auto origin = [&](const WsPiece& p, int& m0, int& n0) {
        int m_tile, n_unit;
        band_coords(p.unit, sched.m_tiles, sched.n_units, m_tile, n_unit);
        m0 = m_tile * TOK;
        n0 = (n_unit * CLUSTER + rank) * kCH;
    };
    const bool has_zeros = args.zeros != nullptr;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1 + 32);                 // the TMA thread's expect-tx + 32 cp.async lanes
            mbar_init(empty_bar + 8 * s, CLUSTER * kWsConsumers * 128);  // per consumer thread of the cluster
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (CLUSTER > 1)
        cluster_sync();  // the peer's barriers are initialised before any multicast or remote arrival
    else
        __syncthreads();

    // Warp 0 of the producer warpgroup: lane 0 issues the TMA loads, all lanes copy the scale / zero rows.
    // g counts the pipeline's K tiles across the pieces (stage g % STAGES, phase (g / STAGES) & 1).
    auto produce = [&]() {
        const T* __restrict__ S = static_cast<const T*>(args.scales);
        const T* __restrict__ Z = static_cast<const T*>(args.zeros);
        int g = 0;
        for (int q = 0; q < n_pieces; ++q) {
            const WsPiece p = ws_piece(sched, unit, k_tiles, q);
            int m0, n0;
            origin(p, m0, n0);
            for (int kt = p.kt_begin; kt < p.kt_end; ++kt, ++g) {
                const int s = g % STAGES;
                if (g >= STAGES) mbar_wait(empty_bar + 8 * s, ((g / STAGES) - 1) & 1);
                if (lane == 0) {
                    mbar_arrive_expect_tx(full_bar + 8 * s, L.x_bytes + L.w_bytes);
                    io.load(stage_x(s) + rank * (L.x_bytes / CLUSTER), &tmap_x, kt * kBK, m0 + rank * (TOK / CLUSTER),
                            full_bar + 8 * s, CLUSTER > 1 ? (1u << CLUSTER) - 1 : 0);
                    tma_load_2d(stage_x(s) + L.x_bytes, &tmap_w, kt * (kBK / 2), n0 / kI, full_bar + 8 * s);
                    if constexpr (BITS == 6)
                        tma_load_2d(stage_x(s) + L.x_bytes + L.lines * 128, &tmap_w2, kt * (kBK / 4), n0 / kI,
                                    full_bar + 8 * s);
                }
                for (int j = lane; j < kCH; j += 32)
                    copy_group_rows<kCH>(stage_s(s), stage_z(s), S, Z, j, kt * kBK, n0, args);
                // The barrier arrives for this lane once its copies have landed (release: visible to the
                // consumers that acquire the barrier); the lane goes on at once.
                cp_async_mbar_arrive(full_bar + 8 * s);
            }
        }
        cp_async_commit();  // no copy outlives the warp
        cp_async_wait<0>();
        // Cluster: the last stages' releases include the peer's remote arrivals; this CTA stays until they landed.
        if constexpr (CLUSTER > 1)
            for (int j = max(0, g - STAGES); j < g; ++j) mbar_wait(empty_bar + 8 * (j % STAGES), (j / STAGES) & 1);
    };

    constexpr bool kRegShift = ws_reg_shift(TOK);
    constexpr int kConsumer0 = kRegShift ? 128 : 0;  // first consumer thread
    if (kRegShift ? wg == 0 : wg == kWsConsumers) {
        // Producer: warp 0 of the first warpgroup (the other three only give their registers back), or the last warp.
        if constexpr (kRegShift) regs_dealloc<kWsProducerRegs>();
        if (warp == (kRegShift ? 0 : 4 * kWsConsumers)) produce();
        return;
    }

    // Consumer warpgroups.
    if constexpr (kRegShift) regs_alloc<kWsConsumerRegs>();
    const int ctid = tid - kConsumer0, cw = ctid / 128, wq = warp & 3;
    constexpr int kSPW = BITS == 8 ? 1 : 2;  // k16 steps per packed word
    constexpr int kSteps = kBK / 16;
    // This thread's channels (rows g and g + 8 of its warp's 16 in each m64 block) and where their words are in a
    // stage: line, line % 8 (the swizzle), first chunk.
    int ch_local[MT][2], w_base[MT][2], w_xor[MT][2], w_chunk0[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = cw * MT * 64 + mt * 64 + wq * 16 + (lane >> 2) + 8 * h;
            const int line = c / kI;
            ch_local[mt][h] = c;
            w_base[mt][h] = line * 32 + (lane & 3);
            w_xor[mt][h] = line & 7;
            w_chunk0[mt][h] = (c % kI) * (4 / kSPW);
        }
    const auto zq_sym = zero_point<BITS, T>(BITS == 8 ? 128.f : 8.f);
    const int gshift = args.group_shift;

    using Frags = uint32_t[MT][kSteps][4];
    // The current piece: its first pipeline tile (g0), first K tile and origin. Tile i of the piece is pipeline
    // tile g0 + i.
    int g0 = 0, kt0 = 0, m0 = 0, n0 = 0;
    // Waits for tile i and converts its weights into the A fragments of its 4 k16 steps.
    auto convert = [&](int i, Frags& af) {
        const int s = (g0 + i) % STAGES;
        mbar_wait(full_bar + 8 * s, ((g0 + i) / STAGES) & 1);
        const uint32_t* sw = stage_w(s);
        const uint16_t* ss = reinterpret_cast<const uint16_t*>(stage_s(s));
        const uint16_t* sz = reinterpret_cast<const uint16_t*>(stage_z(s));
        const int k0 = (kt0 + i) * kBK, gr0 = k0 >> gshift;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = ch_local[mt][h];
                const uint16_t s_lo = ss[c], s_hi = ss[kCH + c];
                const uint16_t z_lo = has_zeros ? sz[c] : 0, z_hi = has_zeros ? sz[kCH + c] : 0;
#pragma unroll
                for (int blk = 0; blk < kSteps / kSPW; ++blk) {
                    const bool second = ((k0 + blk * 16 * kSPW) >> gshift) != gr0;  // group 32: second group row
                    const uint32_t w = sw[w_base[mt][h] + ((w_chunk0[mt][h] + blk) ^ w_xor[mt][h]) * 4];
                    const uint32_t w2 =
                        BITS != 6 ? 0
                                  : fp6::as_half0(sw[L.lines * 32 + (c / kI) * 16 + (w_chunk0[mt][h] + blk) * 2 +
                                                     ((lane >> 1) & 1)],
                                                  lane & 1);
                    const uint16_t sbits = second ? s_hi : s_lo, zbits = second ? z_hi : z_lo;
                    const float z = float(*reinterpret_cast<const T*>(&zbits));
                    word_to_a_frags<BITS, T>(w, has_zeros ? zero_point<BITS, T>(z) : zq_sym,
                                             O::bcast(*reinterpret_cast<const T*>(&sbits)), blk, h, af[mt], w2,
                                             gshift != 31);
                }
            }
    };
    float acc[MT][TOK / 2];
    auto issue = [&](int i, const Frags& af) {
        const uint64_t desc = swizzle128_desc(stage_x((g0 + i) % STAGES));
        wgmma_fence();
#pragma unroll
        for (int st = 0; st < kSteps; ++st)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) wgmma_tok<TOK, T>(acc[mt], af[mt][st], desc + uint64_t(2 * st));
        wgmma_commit();
    };
    // Every consumer thread arrives for its own reads of the stage (release semantics), so the producer's
    // overwrite is ordered after each of them without relying on a warp barrier.
    auto release = [&](int i) {
        const int s = (g0 + i) % STAGES;
        mbar_arrive(empty_bar + 8 * s);
#pragma unroll
        for (int r = 1; r < CLUSTER; ++r) mbar_arrive_cluster(empty_bar + 8 * s, (rank + r) % CLUSTER);
    };
    constexpr int kAcc = MT * TOK / 2, kPart = kAcc * kWsConsumers * 128;  // partial slot: floats per CTA
    for (int q = 0; q < n_pieces; ++q) {
        const WsPiece p = ws_piece(sched, unit, k_tiles, q);
        const int n_k = p.kt_end - p.kt_begin;
        kt0 = p.kt_begin;
        origin(p, m0, n0);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < TOK / 2; ++j) acc[mt][j] = 0.f;
        // Tile i's group is issued, then (group i - DEPTH complete) its stage goes back to the producer and tile
        // i + 1 is converted into the fragments group i - DEPTH used, while groups i - DEPTH + 1 .. i run.
        constexpr int kBufs = DEPTH + 1;
        static_assert(STAGES > DEPTH, "a stage is released DEPTH tiles after its group was issued");
        uint32_t af[kBufs][MT][kSteps][4];
        auto step = [&](int i, const Frags& cur, Frags& next) {
            issue(i, cur);
            wgmma_wait<DEPTH>();
            if (i >= DEPTH) release(i - DEPTH);
            if (i + 1 < n_k) convert(i + 1, next);
        };
        if (n_k > 0) convert(0, af[0]);
        int i = 0;
        for (; i + kBufs <= n_k; i += kBufs)
#pragma unroll
            for (int u = 0; u < kBufs; ++u) step(i + u, af[u], af[(u + 1) % kBufs]);
#pragma unroll
        for (int u = 0; u < kBufs - 1; ++u)
            if (i + u < n_k) step(i + u, af[u], af[(u + 1) % kBufs]);
        wgmma_wait<0>();
        for (int j = max(0, n_k - DEPTH); j < n_k; ++j) release(j);  // (awaited only by a cluster's producers)
        g0 += n_k;

        const int shared_unit = p.unit - sched.dp_tiles;  // >= 0 for the pieces of shared tiles
        if (p.slot >= 0) {
            // A partial: stored in register order (coalesced), then counted on the tile's flag.
            float* dst = sched.partials + (size_t)(p.slot * CLUSTER + rank) * kPart + ctid;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < TOK / 2; ++j) __stcg(dst + (mt * TOK / 2 + j) * (kWsConsumers * 128), acc[mt][j]);
            __threadfence();
            consumers_sync();
            if (ctid == 0) {
                pdl_wait();  // the counters are cleared (gemm.cu's ws_clear_flags)
                flag_release_add(sched.flags + shared_unit * CLUSTER + rank);
            }
            continue;
        }
        if (p.parts > 0) {
            // The tile's tail: wait for its partials, add them in CTA order.
            if (ctid == 0) {
                pdl_wait();
                while (flag_acquire_load(sched.flags + shared_unit * CLUSTER + rank) < unsigned(p.parts))
                    __nanosleep(128);
            }
            consumers_sync();
            for (int z = 0; z < p.parts; ++z) {
                const float* src = sched.partials + (size_t)((p.first + z) * CLUSTER + rank) * kPart + ctid;
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int j = 0; j < TOK / 2; ++j)
                        acc[mt][j] += __ldcg(src + (mt * TOK / 2 + j) * (kWsConsumers * 128));
            }
        }

        // Epilogue (only ever the CTA's last piece, so the pipeline buffers are free for good): both consumer
        // warpgroups are past their last read of every stage before the staging tile overwrites them.
        // acc[mt][4j + e] is channel g (+8 for e >= 2) of this warp's 16 in block mt, token 8j + 2 (t % 4) + (e & 1).
        float f[MT][2];  // FP6 per channel: s * 2^12 (channel_factor; 1 for groups)
        if constexpr (BITS == 6)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) f[mt][h] = channel_factor<BITS, T>(args, n0 + ch_local[mt][h]);
        consumers_sync();
        float* epi = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < TOK / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    epi[(8 * j + 2 * (lane & 3) + (e & 1)) * L.epi_pitch + ch_local[mt][e >> 1]] =
                        BITS == 6 ? acc[mt][4 * j + e] * f[mt][e >> 1] : acc[mt][4 * j + e];
        consumers_sync();
        io.template store<TOK, kCH, L.epi_pitch>(epi, ctid, m0, n0, args, static_cast<T*>(args.c));
    }
#else
    __trap();  // built without sm_90a: the host never selects this kernel on such a build (see gemm.cu)
#endif
}

}  // namespace gemm
}  // namespace trt_woq
