"""Graph passes. Each rewrite pass is ``(gs.Graph, QuantConfig, report=None) -> gs.Graph`` and handles one op of
``graph_passes.registry.ops``; :func:`get_pass` chains the passes of every op for one output format."""

from graph_passes.config import FORMATS
from graph_passes.errors import UserError
from graph_passes.passes.match import LinearMatch, find_linear_layers
from graph_passes.passes.to_plugin import to_weight_only_linear
from graph_passes.passes.to_qdq import QDQ_OPSET, to_qdq
from graph_passes.registry.ops import OPS


def get_pass(fmt: str):
    """The rewrite producing output format ``fmt`` ("plugin" or "qdq"): every registered op's pass, in order."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    rewriters = [op.rewriter(fmt) for op in OPS]

    def rewrite(graph, config, report=None):
        for r in rewriters:
            graph = r(graph, config, report)
        return graph

    return rewrite


__all__ = ["QDQ_OPSET", "LinearMatch", "find_linear_layers", "get_pass", "to_qdq", "to_weight_only_linear"]
