"""Errors raised by layout packers."""


class LayoutError(ValueError):
    """A shape, dtype or value that a packed layout cannot represent; the message names the constraint."""
