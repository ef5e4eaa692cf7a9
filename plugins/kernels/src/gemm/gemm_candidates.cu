// The GEMM's entries in the library's candidate registry (candidates.h): one Candidate per (tile configuration,
// split-K) of gemm.cu, in gemm.cu's order. Built only inside trt_woq_kernels (it needs registry.cu).
#include "../candidates.h"
#include "gemm.h"

namespace trt_woq {
namespace {

// The registry lets M = 0 through (a no-op run); the GEMM's own checks want M >= 1.
trt_woq_linear_params at_least_one_row(const trt_woq_linear_params* p) {
    trt_woq_linear_params q = *p;
    if (q.m == 0) q.m = 1;
    return q;
}

template <int ID>
trt_woq_status supports(const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_linear_params q = at_least_one_row(p);
    return gemm::supports(ID, &q, sm);
}

template <int ID>
size_t workspace(const trt_woq_linear_params* p, int32_t sm) {
    return p->m == 0 ? 0 : gemm::workspace(ID, p, sm);
}

template <int ID>
trt_woq_status launch(const trt_woq_linear_params* p, cudaStream_t stream) {
    return gemm::launch(ID, p, stream);
}

// The heuristic's pick for `q`, remembered for the last problem of this thread (keyed on every field the heuristic
// reads): the registry's dispatch asks each GEMM candidate's score for the same problem in turn, and for M > 128
// the heuristic evaluates 18 plans.
int heuristic_pick(const trt_woq_linear_params& q, int32_t sm) {
    struct Last {
        int64_t m, n, k;
        int32_t format, group, act, layout, sm, pick;
    };
    thread_local Last last{-1, 0, 0, 0, 0, 0, 0, 0, -1};
    const Last key{q.m, q.n, q.k, int32_t(q.weight_format), q.group_size, int32_t(q.act_type), q.layout_version, sm, -1};
    if (key.m != last.m || key.n != last.n || key.k != last.k || key.format != last.format || key.group != last.group ||
        key.act != last.act || key.layout != last.layout || key.sm != last.sm) {
        last = key;
        last.pick = gemm::heuristic(&q, sm);
    }
    return last.pick;
}

// For M > 16 the GEMM heuristic's pick outranks every candidate but the ws GEMV where it measured faster (201, at
// M <= 24; gemv.cu's ws_score); for M <= 16 it stays a low-ranked fallback behind the GEMV; the other GEMM
// candidates are fallbacks, always usable by id.
template <int ID>
int32_t score(const trt_woq_linear_params* p, int32_t sm) {
    const trt_woq_linear_params q = at_least_one_row(p);
    if (heuristic_pick(q, sm) != ID) return 1;
    return p->m > 16 ? 200 : 5;
}

#define TRT_WOQ_GEMM_CANDIDATE_SERVING(id, serves) \
    {gemm::candidate_name(id), serves, supports<id>, workspace<id>, launch<id>, score<id>}
#define TRT_WOQ_GEMM_CANDIDATE(id) TRT_WOQ_GEMM_CANDIDATE_SERVING(id, kWeightOnlyLinear)

}  // namespace

// In gemm.cu's order (id = 2 * tile + split variant, then the stream-K variants of the warp-specialized tiles, then
// the balanced tiles' three variants); the names come from gemm.cu, as trt_woq_gemm_candidate_describe() writes them.
const Candidate kGemmCandidates[] = {
    TRT_WOQ_GEMM_CANDIDATE(0), TRT_WOQ_GEMM_CANDIDATE(1), TRT_WOQ_GEMM_CANDIDATE(2), TRT_WOQ_GEMM_CANDIDATE(3),
    TRT_WOQ_GEMM_CANDIDATE(4), TRT_WOQ_GEMM_CANDIDATE(5), TRT_WOQ_GEMM_CANDIDATE(6), TRT_WOQ_GEMM_CANDIDATE(7),
    TRT_WOQ_GEMM_CANDIDATE(8), TRT_WOQ_GEMM_CANDIDATE(9), TRT_WOQ_GEMM_CANDIDATE(10), TRT_WOQ_GEMM_CANDIDATE(11),
    TRT_WOQ_GEMM_CANDIDATE(12), TRT_WOQ_GEMM_CANDIDATE(13), TRT_WOQ_GEMM_CANDIDATE(14), TRT_WOQ_GEMM_CANDIDATE(15),
    TRT_WOQ_GEMM_CANDIDATE(16), TRT_WOQ_GEMM_CANDIDATE(17), TRT_WOQ_GEMM_CANDIDATE(18), TRT_WOQ_GEMM_CANDIDATE(19),
    TRT_WOQ_GEMM_CANDIDATE(20), TRT_WOQ_GEMM_CANDIDATE(21), TRT_WOQ_GEMM_CANDIDATE(22), TRT_WOQ_GEMM_CANDIDATE(23),
    TRT_WOQ_GEMM_CANDIDATE(24), TRT_WOQ_GEMM_CANDIDATE(25), TRT_WOQ_GEMM_CANDIDATE(26), TRT_WOQ_GEMM_CANDIDATE(27),
    TRT_WOQ_GEMM_CANDIDATE(28), TRT_WOQ_GEMM_CANDIDATE(29), TRT_WOQ_GEMM_CANDIDATE(30), TRT_WOQ_GEMM_CANDIDATE(31),
    TRT_WOQ_GEMM_CANDIDATE(32), TRT_WOQ_GEMM_CANDIDATE(33), TRT_WOQ_GEMM_CANDIDATE(34), TRT_WOQ_GEMM_CANDIDATE(35),
    TRT_WOQ_GEMM_CANDIDATE(36), TRT_WOQ_GEMM_CANDIDATE(37), TRT_WOQ_GEMM_CANDIDATE(38), TRT_WOQ_GEMM_CANDIDATE(39),
    TRT_WOQ_GEMM_CANDIDATE(40), TRT_WOQ_GEMM_CANDIDATE(41), TRT_WOQ_GEMM_CANDIDATE(42), TRT_WOQ_GEMM_CANDIDATE(43),
    TRT_WOQ_GEMM_CANDIDATE(44), TRT_WOQ_GEMM_CANDIDATE(45), TRT_WOQ_GEMM_CANDIDATE(46), TRT_WOQ_GEMM_CANDIDATE(47),
    TRT_WOQ_GEMM_CANDIDATE(48), TRT_WOQ_GEMM_CANDIDATE(49), TRT_WOQ_GEMM_CANDIDATE(50), TRT_WOQ_GEMM_CANDIDATE(51),
    TRT_WOQ_GEMM_CANDIDATE(52), TRT_WOQ_GEMM_CANDIDATE(53), TRT_WOQ_GEMM_CANDIDATE(54), TRT_WOQ_GEMM_CANDIDATE(55),
    TRT_WOQ_GEMM_CANDIDATE(56), TRT_WOQ_GEMM_CANDIDATE(57),
};
static_assert(sizeof(kGemmCandidates) / sizeof(kGemmCandidates[0]) == gemm::kCandidateCount,
              "one registry entry per GEMM candidate");
const int kGemmCandidateCount = sizeof(kGemmCandidates) / sizeof(kGemmCandidates[0]);

}  // namespace trt_woq
