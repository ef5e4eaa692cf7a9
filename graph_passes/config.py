"""QuantConfig: every option of the quantization passes (the CLI builds one; passes never parse arguments)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from graph_passes.dtypes import ACT_DTYPES
from graph_passes.errors import UserError
from graph_passes.quantizers import DEFAULT_CLIP_RATIOS
from graph_passes.registry.act_modes import ACT_MODES, WEIGHT_ONLY
from graph_passes.registry.formats import WeightFormat, all_bits, format_by_bits
from graph_passes.registry.methods import METHODS

FORMATS = ("plugin", "qdq")  # output formats: every op of graph_passes.registry.ops has a rewriter for each


@dataclass
class QuantConfig:
    """Options of the quantization passes.

    ``act_dtype`` is the compute dtype of the op in an FP32 graph (Casts are inserted around it); an FP16 / BF16 graph
    keeps its own dtype. ``act_dtype="fp32"`` is for references only (no Casts, float32 scales; the plugin refuses it).
    ``include`` / ``exclude``: regular expressions searched in node names (``re.search``).
    ``external_data_dir``: folder of the model file, to read initializers stored as external data.
    ``fuse_activations``: the plugin format fuses a Relu / Clip / SiLU / GELU after the op into its epilogue.
    ``bits`` names the weight format (``graph_passes.registry.formats``), ``method`` the quantization method and
    ``act_mode`` the activation mode (their registries); ``layout`` defaults to the weight format's.
    ``act_asymmetric``: a quantized activation mode with an offset per row block (default symmetric).
    ``smooth_alpha``: SmoothQuant smoothing of a quantized activation mode (``graph_passes.smoothing``); the
    calibration samples are given to :func:`graph_passes.pipeline.quantize_model`.
    ``calibration``: the statistics of a method that needs calibration (``graph_passes.calibration``), once gathered.
    """

    bits: int = 4
    group_size: int = 128
    asymmetric: bool = False
    format: str = "plugin"
    act_dtype: str = "fp16"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    min_elements: int = 0
    method: str = "rtn"
    act_mode: str = "weight_only"
    act_asymmetric: bool = False
    smooth_alpha: float | None = None
    layout: int | None = None
    clip_ratios: tuple[float, ...] = DEFAULT_CLIP_RATIOS
    external_data_dir: str | None = None
    progress: bool = False
    fuse_activations: bool = True
    calibration: object = field(default=None, repr=False)
    _include_re: list = field(default_factory=list, init=False, repr=False)
    _exclude_re: list = field(default_factory=list, init=False, repr=False)

    def __post_init__(self):
        if self.bits not in all_bits():
            raise UserError(f"--bits must be one of {', '.join(map(str, all_bits()))}, got {self.bits}")
        fmt = self.weight_format
        if self.group_size not in fmt.group_sizes:
            raise UserError(f"--group-size must be one of {', '.join(map(str, fmt.group_sizes))} for {fmt.label}, "
                            f"got {self.group_size}")
        if self.asymmetric and not fmt.asymmetric:
            raise UserError(f"--asymmetric: {fmt.label} has no zero points")
        if self.format == "qdq" and fmt.qdq is None:
            raise UserError(f"--format qdq: ONNX has no data type for {fmt.label}; use --format plugin")
        METHODS.get(self.method)
        mode = ACT_MODES.get(self.act_mode)
        if mode is not WEIGHT_ONLY:
            if mode.weight_bits and self.bits not in mode.weight_bits:
                raise UserError(f"--act-mode {mode.name} takes --bits {'/'.join(map(str, mode.weight_bits))}, "
                                f"got --bits {self.bits}")
            if self.asymmetric:
                raise UserError(f"--act-mode {mode.name} takes symmetric weights: drop --asymmetric")
            if self.format != "plugin":
                raise UserError(f"--act-mode {mode.name}: standard ONNX has no per-token INT8 activations; use "
                                f"--format plugin (compare measures it through a float emulation)")
        elif self.act_asymmetric or self.smooth_alpha is not None:
            option = "--act-asymmetric" if self.act_asymmetric else "--smooth-alpha"
            raise UserError(f"{option} needs a quantized activation mode (--act-mode w8a8)")
        if self.smooth_alpha is not None and not 0.0 <= self.smooth_alpha <= 1.0:
            raise UserError(f"--smooth-alpha {self.smooth_alpha}: must be in [0, 1]")
        if self.layout is None:
            self.layout = fmt.layout.VERSION
        elif self.layout != fmt.layout.VERSION:
            raise UserError(f"layout {self.layout}: {fmt.label} is packed in layout {fmt.layout.VERSION}")
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
            raise UserError(f"{option} {shlex.quote(pattern)} is not a valid regular expression: {exc}") from None

    @property
    def weight_format(self) -> WeightFormat:
        return format_by_bits(self.bits, "--bits")

    @property
    def algo(self) -> str:
        return self.weight_format.algo

    def name_filter_reason(self, node_name: str) -> str | None:
        """Why --include / --exclude leave out ``node_name``, or None when the node is selected."""
        if self._include_re and not any(r.search(node_name) for r in self._include_re):
            return "not matched by --include"
        for r in self._exclude_re:
            if r.search(node_name):
                return f"excluded by --exclude {shlex.quote(r.pattern)}"
        return None
