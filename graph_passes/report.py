"""QuantReport: what the passes rewrote and skipped (with reasons); printed as a summary, written as JSON."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field

from graph_passes.registry.formats import WEIGHT_FORMATS


@dataclass
class Rewritten:
    node: str
    pattern: str        # MatMul, MatMul+Add, Gemm
    weight: str         # initializer the weight came from
    k: int
    n: int
    act_dtype: str      # fp16 / bf16 / fp32
    casts: bool         # Casts inserted around the op (FP32 graph)
    shared: bool        # packed weight reused from an earlier node
    weight_rel_error: float | None = None  # ||W - dequant(W)|| / ||W|| (None in inspect: nothing quantized)
    activation: str = "none"  # epilogue fused into the op (graph_passes.registry.epilogues)


@dataclass
class Skipped:
    node: str
    op: str
    reason: str         # short, groupable reason
    detail: str = ""    # node-specific numbers


@dataclass
class QuantReport:
    model: str = ""
    output: str = ""
    config: dict = field(default_factory=dict)
    rewritten: list[Rewritten] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    weight_bytes_before: int = 0   # float weights of the rewritten nodes (each shared weight counted once)
    weight_bytes_after: int = 0    # packed weights + scales + zeros replacing them
    model_bytes_before: int = 0    # all constant tensors of the input model (subgraphs, Constant nodes)
    model_bytes_after: int = 0     # idem, of the output model
    external_data: bool = False
    notes: list[str] = field(default_factory=list)

    def skip(self, node, reason: str, detail: str = "") -> None:
        self.skipped.append(Skipped(node=node.name, op=node.op, reason=reason, detail=detail))

    def skip_groups(self) -> "OrderedDict[str, list[Skipped]]":
        groups: OrderedDict[str, list[Skipped]] = OrderedDict()
        for s in self.skipped:
            groups.setdefault(s.reason, []).append(s)
        return groups

    def to_dict(self) -> dict:
        d = asdict(self)
        d["summary"] = {"rewritten": len(self.rewritten), "skipped": len(self.skipped),
                        "skipped_by_reason": {r: len(v) for r, v in self.skip_groups().items()}}
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format(self, max_names: int = 4) -> str:
        """A one-screen summary."""
        lines = []
        if self.model:
            lines.append(f"model:     {self.model}" + (f" -> {self.output}" if self.output else ""))
        if self.config:
            c = self.config
            g = "per-channel" if c.get("group_size") == -1 else f"g{c.get('group_size')}"
            label = next((f.label for f in WEIGHT_FORMATS if f.bits == c.get("bits")), f"bits {c.get('bits')}")
            words = [label, g, "asymmetric" if c.get("asymmetric") else "symmetric", f"format={c.get('format')}",
                     f"act_dtype={c.get('act_dtype')}", f"method={c.get('method')}"]
            if c.get("act_mode", "weight_only") != "weight_only":
                words.append(f"act_mode={c['act_mode']}")
                words += ["act_asymmetric"] if c.get("act_asymmetric") else []
                words += [f"smooth_alpha={c['smooth_alpha']}"] if c.get("smooth_alpha") is not None else []
            words += [] if c.get("fuse_activations", True) else ["no-fuse-activations"]
            lines.append("options:   " + " ".join(words))
        patterns: OrderedDict[str, int] = OrderedDict()
        for r in self.rewritten:
            patterns[r.pattern] = patterns.get(r.pattern, 0) + 1
        shared = sum(r.shared for r in self.rewritten)
        detail = ", ".join(f"{v} {k}" for k, v in patterns.items())
        lines.append(f"rewritten: {len(self.rewritten)} node(s)" + (f" ({detail})" if detail else "")
                     + (f", {shared} reusing a shared packed weight" if shared else ""))
        fused: OrderedDict[str, int] = OrderedDict()
        for r in self.rewritten:
            if r.activation != "none":
                fused[r.activation] = fused.get(r.activation, 0) + 1
        if fused:
            lines.append("fused:     " + ", ".join(f"{v} {k}" for k, v in fused.items()) + " into the op's epilogue")
        errs = sorted((r.weight_rel_error, r.node) for r in self.rewritten if r.weight_rel_error is not None)
        if errs:
            # A statistic of the rounding, not a failure: ||W - dequant(W)|| / ||W|| over the rewritten weights.
            lines.append(f"rounding:  weight quantization error (relative RMS) median {errs[len(errs) // 2][0]:.4f}, "
                         f"largest {errs[-1][0]:.4f} ({errs[-1][1]})")
        lines.append(f"skipped:   {len(self.skipped)} node(s)")
        for reason, items in self.skip_groups().items():
            names = ", ".join(s.node for s in items[:max_names]) + (", ..." if len(items) > max_names else "")
            lines.append(f"  {len(items):5d} x {reason}: {names}")
        if self.weight_bytes_before:
            ratio = self.weight_bytes_before / max(1, self.weight_bytes_after)
            lines.append(f"weights:   {_mb(self.weight_bytes_before)} -> {_mb(self.weight_bytes_after)} "
                         f"({ratio:.2f}x smaller) in the rewritten nodes")
        if self.model_bytes_before and self.output:
            lines.append(f"model:     {_mb(self.model_bytes_before)} -> {_mb(self.model_bytes_after)} of initializers"
                         + (" (external data)" if self.external_data else ""))
        elif self.model_bytes_before:
            lines.append(f"model:     {_mb(self.model_bytes_before)} of initializers")
        lines.extend(f"note:      {n}" for n in self.notes)
        return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"
