"""trt_woq: runtime side of trt-woq (kernels wrapper, TensorRT plugin loading, engine build, compare, bench).

Submodules import cuda-python, TensorRT and polygraphy lazily, so `import trt_woq` works on any machine.
"""

__version__ = "0.1.0"
