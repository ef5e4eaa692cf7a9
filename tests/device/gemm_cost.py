"""The SM90 GEMM dispatch's cost model for M > 128 on the host (gemm.cu: make_plan, ws_cost, balanced_pick), so that
a candidate sweep's JSON (tests/device/sweep_gemm.py) can be scored against any constants and tiles without a GPU:
the fit behind gemm.cu's constants, the pruning of sweep_gemm.py, and the figures of docs/kernels_gemm.md.

    python3 tests/device/gemm_cost.py check SWEEP.json [LIB] # RULE's picks == the run's dispatch ('auto'), or those
                                                           # of LIB's dispatch (host code: a GEMM test library,
                                                           # libtrt_woq_gemm.so, built for any arch; no GPU needed)
    python3 tests/device/gemm_cost.py score SWEEP.json     # per format / shape / M range: RULE's picks x cuBLAS FP16,
                                                           # the run's 'old' column (--old-lib) and the fastest
    python3 tests/device/gemm_cost.py fit SWEEP.json       # grid search: a stream-K term and the sharing
                                                           # constant; then the clustered tiles with a per-K-tile
                                                           # factor

A tile is (name, tokens T, cluster); its candidates are whole tiles, the tail split and stream-K. Per K tile of one
CTA (a cluster's CTAs run side by side) it costs (ktile + fp6 + token T) x factor (`c2` for the clustered tiles,
else 1), stream-K plans `streamk` more.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import sys
from dataclasses import dataclass, replace

SMS, BK, MAX_SPLIT, MIN_K_PER_SPLIT = 132, 64, 16, 4
VARIANTS = {"whole": "", "split": "_tailsplit", "streamk": "_streamk"}


@dataclass(frozen=True)
class Tile:
    name: str
    tok: int
    cluster: int = 1


@dataclass(frozen=True)
class Model:
    ktile: float = 0.30
    fp6: float = 0.035
    token: float = 0.0019
    shared: float = 4.0
    partial: float = 3.0
    c2: float = 1.0
    streamk: float = 0.0  # stream-K's two-piece kernel: this fraction more per K tile (its whole waves too)


# gemm.cu's balanced_pick: its constants (kCost) and tiles, in its order.
RULE = Model()
RULE_TILES = [Tile("wgmma_ws_256x128x64_s5", 256)] + [Tile(f"wgmma_ws_{t}x128x64_s6", t)
                                                       for t in (144, 160, 176, 192, 224)]
C2_TILES = [Tile(f"wgmma_ws_{t}x128x64_s6_c2", t, 2) for t in (144, 160, 176, 192, 224)]  # tactics only


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan(tile: Tile, variant: str, m: int, n: int, k: int) -> dict | None:
    """gemm.cu's make_plan for a ws tile; None where the split variant would not split."""
    kt = k // BK
    tiles = cdiv(m, tile.tok) * cdiv(cdiv(n, 128), tile.cluster)
    whole = dict(split=1, share=kt, tiles=tiles, dp=tiles)
    if variant == "whole":
        return whole
    wave = SMS // tile.cluster
    dp = tiles // wave * wave
    tail = tiles - dp
    if tail == 0:
        return None
    if variant == "split":
        split = min(MAX_SPLIT, wave // tail)
        while split > 1 and kt // split < MIN_K_PER_SPLIT:
            split -= 1
        if split < 2:
            return None
        share = cdiv(kt, split)
        tile_iters = cdiv(kt, share) * share
    else:
        share = max(cdiv(tail * kt, wave), cdiv(kt, MAX_SPLIT), MIN_K_PER_SPLIT)
        tile_iters = kt
        if share >= kt:
            return None
    return dict(split=cdiv(tile_iters, share), share=share, tiles=tiles, dp=dp, streamk=variant == "streamk")


def cost(model: Model, tile: Tile, p: dict, bits: int, k: int) -> float:
    """gemm.cu's ws_cost in microseconds."""
    factor = model.c2 if tile.cluster > 1 else 1.0
    tile_k = (model.ktile + (model.fp6 if bits == 6 else 0.0) + model.token * tile.tok) * factor
    wave, k_tiles = SMS / tile.cluster, k / BK
    if p["split"] < 2:
        return math.ceil(p["tiles"] / wave) * k_tiles * tile_k
    tile_k *= 1 + (model.streamk if p["streamk"] else 0.0)
    return (p["dp"] / wave * k_tiles * tile_k + p["share"] * tile_k + model.shared
            + model.partial * tile.tok / 256 * p["split"])


def candidates(tiles, m: int, n: int, k: int):
    """(candidate name, tile, plan) of every supported variant."""
    for tile, (variant, suffix) in itertools.product(tiles, VARIANTS.items()):
        p = plan(tile, variant, m, n, k)
        if p is not None:
            yield f"gemm_{tile.name}{suffix}", tile, p


def pick(model: Model, tiles, m: int, n: int, k: int, bits: int, timed=None) -> str:
    """The lowest modelled cost (first wins ties, in gemm.cu's order); `timed`: only these names."""
    best = None
    for name, tile, p in candidates(tiles, m, n, k):
        if timed is not None and not timed.get(name):
            continue
        c = cost(model, tile, p, bits, k)
        if best is None or c < best[0]:
            best = (c, name)
    return best[1] if best else None


def ranked(model: Model, tiles, m: int, n: int, k: int, bits: int, within: float) -> list[str]:
    """Names whose modelled cost is within `within` x the lowest (sweep_gemm.py --prune)."""
    costs = {name: cost(model, tile, p, bits, k) for name, tile, p in candidates(tiles, m, n, k)}
    low = min(costs.values())
    return [name for name, c in costs.items() if c <= within * low]


def m_range(m: int) -> str:
    return "129-1023" if m < 1024 else ">=1024"


def gm_min(values: list[float]) -> tuple[float, float, int]:
    return math.exp(sum(map(math.log, values)) / len(values)), min(values), len(values)


def score(rows, model: Model, tiles) -> dict:
    """Per (bits, M range): geometric mean / minimum of cuBLAS time / the pick's time, and of (fastest of `tiles`'
    timed candidates) / the pick's time, over the rows where the pick was timed."""
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    names = {name for t in tiles for name in (f"gemm_{t.name}{s}" for s in VARIANTS.values())}
    for r in rows:
        p = pick(model, tiles, r["m"], r["n"], r["k"], r["bits"], r["all"])
        if p is None:
            continue
        best = min(v for c, v in r["all"].items() if c in names and v)
        key = (r["bits"], m_range(r["m"]))
        out[key]["x cuBLAS"].append(r["cublas_us"] / r["all"][p])
        out[key]["best/pick"].append(best / r["all"][p])
    return {key: {what: gm_min(v) for what, v in d.items()} for key, d in sorted(out.items())}


def table(rows) -> str:
    """Per (bits, shape, M range) and per (bits, M range): x cuBLAS FP16 (geometric mean / minimum) of RULE's picks,
    of the 'old' column and of the fastest candidate timed."""
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        p = pick(RULE, RULE_TILES, r["m"], r["n"], r["k"], r["bits"])
        for key in ((r["bits"], f"{r['k']} x {r['n']}", m_range(r["m"])), (r["bits"], "all", m_range(r["m"]))):
            groups[key]["rule"].append(r["cublas_us"] / r["all"][p])
            if r.get("old_us"):
                groups[key]["old"].append(r["cublas_us"] / r["old_us"])
            groups[key]["best"].append(r["cublas_us"] / min(v for v in r["all"].values() if v))
    out = ["| bits | K x N | M | n | rule | old | fastest |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for (bits, shape, rng), d in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] == "all", kv[0][2])):
        cells = [("%.3f / %.3f" % gm_min(d[w])[:2]) if d[w] else "-" for w in ("rule", "old", "best")]
        out.append(f"| {bits} | {shape} | {rng} | {len(d['rule'])} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def fmt(scores: dict) -> str:
    return "\n".join(f"  bits {b} M {rng:>8}: " + "  ".join(f"{what} {gm:.3f} / {mn:.3f} (n {n})"
                                                           for what, (gm, mn, n) in d.items())
                     for (b, rng), d in scores.items())


def library_dispatch(path: str):
    """The name of the candidate that the GEMM library at `path` dispatches for a sweep row (FP16 activations, INT4
    g128 / INT8 and FP6 per channel as the sweep; on SM90)."""
    import ctypes

    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/python")
    from trt_woq.kernels import Act, LinearParams, weight_format_from_bits

    lib = ctypes.CDLL(path)
    lib.trt_woq_gemm_dispatch.argtypes = [ctypes.POINTER(LinearParams), ctypes.c_int32]
    buf = ctypes.create_string_buffer(128)

    def dispatch(r: dict) -> str:
        prm = LinearParams(m=r["m"], n=r["n"], k=r["k"], weight_format=weight_format_from_bits(r["bits"]),
                           group_size=128 if r["bits"] == 4 else -1, layout_version=2 if r["bits"] == 6 else 1,
                           act_type=Act.FP16)
        lib.trt_woq_gemm_candidate_describe(lib.trt_woq_gemm_dispatch(ctypes.byref(prm), 90), buf, len(buf))
        return buf.value.decode()

    return dispatch


def main() -> int:
    cmd, path = sys.argv[1], sys.argv[2]
    rows = [r for r in json.load(open(path))["rows"] if 129 <= r["m"]]
    if cmd == "check":
        lib_pick = library_dispatch(sys.argv[3]) if len(sys.argv) > 3 else lambda r: r["auto"]
        bad = [(r["bits"], r["k"], r["n"], r["m"], lib_pick(r)) for r in rows
               if pick(RULE, RULE_TILES, r["m"], r["n"], r["k"], r["bits"]) != lib_pick(r)]
        print(f"{len(rows) - len(bad)} of {len(rows)} picks as the library's")
        for b in bad[:20]:
            print("  differs:", b)
        return 1 if bad else 0
    if cmd == "score":
        print(table(rows))
        return 0
    print("the rule:\n" + fmt(score(rows, RULE, RULE_TILES)))
    grids = (("stream-K and sharing", RULE_TILES, dict(streamk=[0.0, 0.01, 0.02, 0.04], shared=[1.0, 2.0, 3.0, 4.0])),
             ("with the clustered tiles", RULE_TILES + C2_TILES, dict(c2=[0.90 + 0.02 * i for i in range(8)])))
    for label, tiles, grid in grids:
        best = None
        for values in itertools.product(*grid.values()):
            model = replace(RULE, **dict(zip(grid, values)))
            s = score(rows, model, tiles)
            objective = sum(math.log(d["best/pick"][0]) for d in s.values())
            if best is None or objective > best[0]:
                best = (objective, model, s)
        print(f"best {label}: {best[1]}:\n" + fmt(best[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
