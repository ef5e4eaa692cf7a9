"""Errors of the graph passes. The CLI prints them as one line and exits with status 2."""

from graph_passes.layouts.errors import LayoutError


class UserError(Exception):
    """A problem with the user's input (file, model, option) that the message explains and tells how to fix."""


class QuantizationError(UserError):
    """A weight that cannot be quantized (NaN/Inf, a shape the options cannot take); the message names the tensor."""


__all__ = ["LayoutError", "QuantizationError", "UserError"]
