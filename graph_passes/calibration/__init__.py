"""Calibrated weight quantization (AWQ, GPTQ) from a calibration set. Pure numpy, plus ONNX Runtime to gather the
statistics.

  * :mod:`~graph_passes.calibration.codec`: what a method needs from a weight format (a group codec) and the
    clip-ratio search over it;
  * :mod:`~graph_passes.calibration.stats`: streaming per-activation statistics (mean |x|, X^T X, a row subsample);
  * :mod:`~graph_passes.calibration.collect`: those statistics from ONNX Runtime runs, memory-bounded;
  * :mod:`~graph_passes.calibration.awq`, :mod:`~graph_passes.calibration.gptq`: the algorithms;
  * :mod:`~graph_passes.calibration.fold`: AWQ's graph edit (1/s into the producer or a Mul);
  * :mod:`~graph_passes.calibration.methods`: the pipeline step and the methods' per-weight quantizers.
"""
