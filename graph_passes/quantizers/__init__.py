"""Weight quantizers, one module per family of weight formats; pure numpy.

A quantizer is ``(w[K, N], bits, group_size, asymmetric, act_dtype, clip_ratios, name) -> result`` where the result
has ``u`` (uint8 codes [K, N]), ``scales`` / ``zeros`` ([K/G, N], act-dtype-exact float32), ``rel_error`` and a
float64 ``dequantize()``. The weight-format registry (``graph_passes.registry.formats``) names the quantizer of
each format; the quantization methods (``graph_passes.registry.methods``) call it.
"""

from graph_passes.quantizers.common import DEFAULT_CLIP_RATIOS, check_weight, round_scales
from graph_passes.quantizers.fp6 import Fp6Weight, quantize_fp6
from graph_passes.quantizers.integer import QuantizedWeight, quantize_rtn

__all__ = ["DEFAULT_CLIP_RATIOS", "Fp6Weight", "QuantizedWeight", "check_weight", "quantize_fp6", "quantize_rtn",
           "round_scales"]
