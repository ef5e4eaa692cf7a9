"""Packed weight layouts, by version number. See docs/layouts.md."""

from graph_passes.layouts import fp6_split_v1, interleaved_v1
from graph_passes.layouts.errors import LayoutError

LAYOUTS = {interleaved_v1.VERSION: interleaved_v1, fp6_split_v1.VERSION: fp6_split_v1}


def get_layout(version: int):
    """The module implementing layout ``version`` (pack, unpack, dequantize_reference, check_shape, packed_shape,
    unpacked_shape, VERSION, NAME)."""
    try:
        return LAYOUTS[version]
    except KeyError:
        raise LayoutError(f"unknown layout version {version}; known: {sorted(LAYOUTS)}") from None


__all__ = ["LAYOUTS", "LayoutError", "fp6_split_v1", "get_layout", "interleaved_v1"]
