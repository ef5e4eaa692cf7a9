"""Pattern finder for 2-D convolutions: the ``Conv`` nodes the conv passes can quantize, and why the others stay float.

Pattern (main graph and the bodies of If / Loop / Scan, as for linear layers): ``Conv(X, W[, B])`` with W a constant [OC, IC, kh, kw] (initializer or Constant, optionally
behind Cast), ``group = 1``, X 4-D (NCHW); a following ``Add`` of a constant holding OC values broadcast over the
channels ([OC, 1, 1], [1, OC, 1, 1]) folds into the bias together with B. ``auto_pad`` is resolved to explicit pads
(SAME_* with a stride > 1 needs the input's static height / width).

Default policy (docs/op.md, "Which convolutions are quantized"): these stay float with the reason in the report,
unless a ``--include`` pattern names the node:
  * fewer than ``MIN_OUT_CHANNELS`` output channels (a detector's box / class heads: low-bit error would dominate);
  * fixed integer weights (every weight an integer, e.g. the arange kernel of a distribution-focal-loss head).
Never quantized: grouped / depthwise convs, 1-D / 3-D convs, malformed geometry (empty weight, stride / dilation
< 1, negative pad), K = IC * kh * kw not fitting the layout (the RGB stem, K = 27), OC not a multiple of the
interleave; ``--exclude`` / ``--min-elements`` apply as for linear layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_passes.op_conv import K_ORDER_CIJ, K_ORDER_IJC, matrix_of
from graph_passes.passes.match import (LinearMatch, Skip, _dtype_of, _np_dtype, _resolve_constant, _shape_reason,
                                       constant_values, find_layers, following_add, read_constant,
                                       weight_source)
from graph_passes.registry.ops import CONV2D

MIN_OUT_CHANNELS = 16
BAD_GEOMETRY = "conv geometry the op cannot take"  # an empty weight, stride / dilation < 1, a negative pad
# K order (i, j, c) when a tap's channels fill whole 16-byte vectors of FP16 / BF16: the channels-last conv kernel
# loads 8 of them at once (docs/kernels.md, Conv2d); (c, i, j) otherwise.
CHANNELS_LAST_VECTOR = 8


@dataclass
class ConvMatch(LinearMatch):
    """A Conv node to quantize: the weight as the implicit-GEMM ``W[K, N]`` (K order of ``graph_passes.op_conv``)."""

    in_channels: int = 0
    kernel_shape: tuple = (1, 1)
    strides: tuple = (1, 1)
    pads: tuple = (0, 0, 0, 0)
    dilations: tuple = (1, 1)
    k_order: int = K_ORDER_CIJ

    def load_weight(self, base_dir: str | None) -> np.ndarray:
        w = read_constant(self.source, base_dir)
        for step in self.chain:
            w = w.astype(_np_dtype(step[1]))
        return matrix_of(np.asarray(w, np.float32).reshape(self.n, self.in_channels, *self.kernel_shape),
                         self.k_order)


def _ints(node, name, default):
    v = node.attrs.get(name)
    return tuple(int(i) for i in v) if v is not None else tuple(default)


def _resolve_pads(node, x, kernel, strides, dilations):
    """Explicit [top, left, bottom, right], or a reason string."""
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto == "NOTSET":
        pads = _ints(node, "pads", (0, 0, 0, 0))
        return pads if len(pads) == 4 else f"pads {list(pads)} is not 4 values"
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        return f"unknown auto_pad {auto!r}"
    shape = getattr(x, "shape", None)
    begin, end = [], []
    for axis in range(2):
        size = shape[2 + axis] if shape is not None and len(shape) == 4 else None
        s, d, k = strides[axis], dilations[axis], kernel[axis]
        if s == 1:
            total = d * (k - 1)
        elif isinstance(size, int):
            out = -(-size // s)
            total = max(0, (out - 1) * s + d * (k - 1) + 1 - size)
        else:
            return f"auto_pad {auto} with stride {s} needs a static input height / width"
        small, large = total // 2, total - total // 2
        begin.append(large if auto == "SAME_LOWER" else small)
        end.append(small if auto == "SAME_LOWER" else large)
    return (begin[0], begin[1], end[0], end[1])


def _channel_bias(tensor, n: int, base_dir):
    """float64 [N] from a constant broadcast over the channels of an NCHW tensor ([N, 1, 1], [1, N, 1, 1]), or a
    reason string."""
    r = _resolve_constant(tensor)
    if isinstance(r, str):
        return r
    const, _, chain, transposes = r
    shape = tuple(const.shape)
    if transposes or len(shape) not in (3, 4) or shape[-3] != n or int(np.prod(shape)) != n:
        return f"constant of shape {list(shape)} is not one value per output channel ([N, 1, 1] or [1, N, 1, 1])"
    return constant_values(const, chain, base_dir).reshape(n)


def find_conv_layers(graph, config) -> tuple[list[ConvMatch], list[Skip]]:
    """The quantizable Conv nodes of ``graph`` and the skipped ones with a reason each."""
    return find_layers(graph, config, ("Conv",), _match_node,
                       lambda m, c, layout: _act_mode_reason(c) or _format_reason(c) or _layout_reason(m, c, layout)
                       or _policy_reason(m, c))


def _act_mode_reason(config):
    if config.act_mode != "weight_only":
        return (f"WeightOnlyConv is weight-only; --act-mode {config.act_mode} applies to linear layers", "")
    return None


def _format_reason(config):
    bits = CONV2D.weight_bits
    if config.weight_format.bits not in bits:
        return (f"no conv kernel serves {config.weight_format.name} weights; convs stay float (--bits "
                f"{' / '.join(map(str, bits))} quantizes them)", "")
    return None


def _layout_reason(m: ConvMatch, config, layout):
    """The linear layers' shape rules on the implicit-GEMM K x N, K named in conv terms."""
    reason = _shape_reason(m, config, layout)
    if reason and m.k % layout.K_TILE:
        kh, kw = m.kernel_shape
        return (f"conv K = in_channels x kh x kw not a multiple of {layout.K_TILE} (layout {layout.NAME}; the RGB "
                f"stem stays float)", f"K = {m.in_channels} x {kh} x {kw} = {m.k}")
    return reason


def _policy_reason(m: ConvMatch, config):
    """The default policy's reason to keep a conv float, unless an --include pattern names it."""
    if config.include and config.name_filter_reason(m.path) is None:
        return None
    if m.n < MIN_OUT_CHANNELS:
        return (f"conv with fewer than {MIN_OUT_CHANNELS} output channels kept float (policy; --include the node "
                f"to quantize it)", f"OC = {m.n}")
    w = m.load_weight(config.external_data_dir)
    if np.array_equal(w, np.round(w)):
        return ("conv with fixed integer weights kept float (policy; --include the node to quantize it)",
                f"weights in [{w.min():g}, {w.max():g}]")
    return None


def _match_node(node, config, graph_outputs, overridable):
    if len(node.inputs) < 2 or not node.outputs:
        return Skip(node, "malformed node (fewer than 2 inputs)")
    x = node.inputs[0]
    group = int(node.attrs.get("group", 1))
    r = weight_source(node, node.inputs[1], overridable)
    if isinstance(r, Skip):
        return r
    source, source_name, chain, transposes = r
    shape = tuple(source.shape)
    if transposes or len(shape) != 4:
        return Skip(node, "not a 2-D convolution with a [OC, IC, kh, kw] weight", f"weight shape {list(shape)}")
    if group != 1:
        kind = "depthwise" if shape[1] == 1 else "grouped"
        return Skip(node, "grouped / depthwise conv stays float (group != 1)", f"{kind}, group = {group}")
    x_shape = getattr(x, "shape", None)
    if x_shape is not None and len(x_shape) != 4:
        return Skip(node, "conv input is not 4-D (NCHW)", f"rank {len(x_shape)}")
    oc, ic, kh, kw = (int(d) for d in shape)
    kernel = _ints(node, "kernel_shape", (kh, kw))
    strides = _ints(node, "strides", (1, 1))
    dilations = _ints(node, "dilations", (1, 1))
    if kernel != (kh, kw) or len(strides) != 2 or len(dilations) != 2:
        return Skip(node, "conv attributes disagree with the weight",
                    f"kernel_shape {list(kernel)}, weight {list(shape)}")
    if min(shape) < 1 or min(strides + dilations) < 1:
        return Skip(node, BAD_GEOMETRY, f"weight {list(shape)}, strides {list(strides)}, dilations {list(dilations)}")
    pads = _resolve_pads(node, x, kernel, strides, dilations)
    if isinstance(pads, str):
        return Skip(node, "conv padding cannot be resolved", pads)
    if min(pads) < 0:
        return Skip(node, BAD_GEOMETRY, f"pads {list(pads)}")
    casts = [step for step in chain if step[0] == "Cast"]
    dtype = _np_dtype(casts[-1][1]) if casts else _dtype_of(source)
    m = ConvMatch(node=node, pattern="Conv", x=x, output=node.outputs[0], source=source, source_name=source_name,
                  chain=chain, dtype=dtype, k=ic * kh * kw, n=oc, in_channels=ic, kernel_shape=kernel,
                  strides=strides, pads=pads, dilations=dilations,
                  k_order=K_ORDER_IJC if ic % CHANNELS_LAST_VECTOR == 0 else K_ORDER_CIJ)
    base_dir = config.external_data_dir
    bias = np.zeros(oc)
    has_bias = False
    if len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].name:
        r = _resolve_constant(node.inputs[2])
        if isinstance(r, str) or tuple(r[0].shape) != (oc,):
            return Skip(node, "Conv bias is not a constant of OC values", r if isinstance(r, str) else "")
        bias = bias + np.asarray(read_constant(r[0], base_dir), np.float64).reshape(oc)
        has_bias = True
    found = following_add(node, graph_outputs)
    if found is not None:
        add, other = found
        extra = _channel_bias(other, oc, base_dir)
        if not isinstance(extra, str):
            bias, has_bias = bias + extra, True
            m.add_node, m.output, m.pattern = add, add.outputs[0], "Conv+Add"
    m.bias = bias if has_bias else None
    return m
