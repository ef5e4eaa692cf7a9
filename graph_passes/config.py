"""QuantConfig: every option of the quantization passes (the CLI builds one; passes never parse arguments)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from graph_passes.errors import UserError
from graph_passes.quantize import ACT_DTYPES, DEFAULT_CLIP_RATIOS, GROUP_SIZES

FORMATS = ("plugin", "qdq")


@dataclass
class QuantConfig:
    """Options of the quantization passes.

    ``act_dtype`` is the compute dtype of the op in an FP32 graph (Casts are inserted around it); an FP16 / BF16 graph
    keeps its own dtype. ``act_dtype="fp32"`` is for references only (no Casts, float32 scales; the plugin refuses it).
    ``include`` / ``exclude``: regular expressions searched in node names (``re.search``).
    ``external_data_dir``: folder of the model file, to read initializers stored as external data.
    """

    bits: int = 4
    group_size: int = 128
    asymmetric: bool = False
    format: str = "plugin"
    act_dtype: str = "fp16"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    min_elements: int = 0
    layout: int = 1
    clip_ratios: tuple[float, ...] = DEFAULT_CLIP_RATIOS
    external_data_dir: str | None = None
    progress: bool = False
    _include_re: list = field(default_factory=list, init=False, repr=False)
    _exclude_re: list = field(default_factory=list, init=False, repr=False)

    def __post_init__(self):
        if self.bits not in (4, 8):
            raise UserError(f"--bits must be 8 or 4, got {self.bits}")
        if self.group_size not in GROUP_SIZES:
            raise UserError(f"--group-size must be one of {', '.join(map(str, GROUP_SIZES))}, got {self.group_size}")
        if self.format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.act_dtype not in ACT_DTYPES:
            raise UserError(f"--act-dtype must be one of {', '.join(ACT_DTYPES)}, got {self.act_dtype!r}")
        if self.min_elements < 0:
            raise UserError(f"--min-elements must be >= 0, got {self.min_elements}")
        self.include = tuple(self.include)
        self.exclude = tuple(self.exclude)
        self._include_re = [self._compile(p, "--include") for p in self.include]
        self._exclude_re = [self._compile(p, "--exclude") for p in self.exclude]

    @staticmethod
    def _compile(pattern: str, option: str):
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise UserError(f"{option} {pattern!r} is not a valid regular expression: {exc}") from None

    @property
    def algo(self) -> str:
        return f"weight_only_int{self.bits}"

    def name_filter_reason(self, node_name: str) -> str | None:
        """Why --include / --exclude leave out ``node_name``, or None when the node is selected."""
        if self._include_re and not any(r.search(node_name) for r in self._include_re):
            return "not matched by --include"
        for r in self._exclude_re:
            if r.search(node_name):
                return f"excluded by --exclude {r.pattern!r}"
        return None
