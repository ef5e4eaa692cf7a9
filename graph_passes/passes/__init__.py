"""Graph passes, registered by output format. Each is ``(gs.Graph, QuantConfig, report=None) -> gs.Graph``."""

from graph_passes.passes.match import LinearMatch, find_linear_layers
from graph_passes.passes.to_plugin import to_weight_only_linear
from graph_passes.passes.to_qdq import QDQ_OPSET, to_qdq

PASSES = {"plugin": to_weight_only_linear, "qdq": to_qdq}


def get_pass(fmt: str):
    """The rewrite pass producing output format ``fmt`` ("plugin" or "qdq")."""
    from graph_passes.errors import UserError

    try:
        return PASSES[fmt]
    except KeyError:
        raise UserError(f"unknown format {fmt!r}; known: {', '.join(PASSES)}") from None


__all__ = ["PASSES", "QDQ_OPSET", "LinearMatch", "find_linear_layers", "get_pass", "to_qdq", "to_weight_only_linear"]
