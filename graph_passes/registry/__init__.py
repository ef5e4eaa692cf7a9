"""Registries, one per axis of what the system can do; each entry names everything a feature needs.

| axis | module | registry | entry |
| --- | --- | --- | --- |
| weight format | ``registry.formats`` | ``WEIGHT_FORMATS`` | :class:`~graph_passes.registry.formats.WeightFormat` |
| op | ``registry.ops`` | ``OPS`` | :class:`~graph_passes.registry.ops.OpKind` |
| activation mode | ``registry.act_modes`` | ``ACT_MODES`` | :class:`~graph_passes.registry.act_modes.ActMode` |
| epilogue | ``registry.epilogues`` | ``EPILOGUES`` | :class:`~graph_passes.registry.epilogues.Epilogue` |
| quantization method | ``registry.methods`` | ``METHODS`` | :class:`~graph_passes.registry.methods.QuantMethod` |

Import the axis module you need (``from graph_passes.registry.formats import WEIGHT_FORMATS``): this package does not
import them. The registries sit below the passes (the passes and the op contract read them); the op registry names
the passes that implement an op by :class:`Ref` ("module:function", imported on first use), so no module imports
back up.
The C ABI (``plugins/kernels/include/trt_woq/kernels.h``) has one enum per axis except the method; entries carry
their enum's name and value. ``tests/graph_passes/test_registry.py`` walks every registry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Generic, Iterator, TypeVar

from graph_passes.errors import UserError

E = TypeVar("E")


@dataclass(frozen=True)
class Ref:
    """A function named ``"package.module:function"``, imported when first called or resolved."""

    target: str

    def resolve(self) -> Any:
        module, sep, attr = self.target.partition(":")
        if not sep:
            raise ValueError(f"{self.target!r}: expected 'module:function'")
        return getattr(importlib.import_module(module), attr)

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)


class Registry(Generic[E]):
    """Entries of one axis by name, in registration order. Entries are frozen dataclasses with ``name`` and, for the
    axes the C ABI knows, ``c_name`` / ``c_enum`` (unique within the axis)."""

    def __init__(self, axis: str, option: str = ""):
        self.axis = axis
        self.option = option  # the CLI option choosing an entry, for error messages
        self._entries: dict[str, E] = {}

    def add(self, entry: E) -> E:
        name = entry.name
        if name in self._entries:
            raise ValueError(f"{self.axis} {name!r} is registered twice")
        enum = getattr(entry, "c_enum", None)
        if enum is not None and any(getattr(e, "c_enum", None) == enum for e in self._entries.values()):
            raise ValueError(f"{self.axis} {name!r}: C enum value {enum} is taken")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> E:
        """The entry called ``name``; UserError listing the known ones otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            where = f"{self.option}: " if self.option else ""
            raise UserError(f"{where}unknown {self.axis} {name!r}; known: {', '.join(self._entries)}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __iter__(self) -> Iterator[E]:
        return iter(tuple(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


__all__ = ["Ref", "Registry"]
