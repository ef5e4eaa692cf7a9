"""trt_woq.runtime: host-side conversions, refusals without TensorRT, and (GPU only) cuda-python buffers."""

from __future__ import annotations

import numpy as np
import pytest

from trt_woq import runtime
from trt_woq.errors import TensorRTNotFoundError


def test_bf16_round_trip_is_rounding_to_nearest_even():
    rng = np.random.default_rng()
    x = rng.standard_normal(4096).astype(np.float32) * np.float32(100)
    y = runtime.bf16_bits_to_float32(runtime.float32_to_bf16_bits(x))
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0 ** -8)
    # bf16 values survive exactly; ties go to even
    assert runtime.float32_to_bf16_bits(np.float32(1.0)) == 0x3F80
    tie = np.array([0x3F808000], np.uint32).view(np.float32)  # halfway between 0x3F80 and 0x3F81
    assert runtime.float32_to_bf16_bits(tie)[0] == 0x3F80


def test_engine_runner_without_tensorrt(no_tensorrt, fake_plugin):
    with pytest.raises(TensorRTNotFoundError):
        runtime.EngineRunner(b"not an engine")


def _gpu_or_skip():
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        pytest.skip("cuda-python (cuda.bindings) is not installed")
    err, count = cudart.cudaGetDeviceCount()
    if err != cudart.cudaError_t.cudaSuccess or count == 0:
        pytest.skip("no CUDA GPU")


def test_device_buffer_round_trip_on_a_stream():
    _gpu_or_skip()
    rng = np.random.default_rng()
    host = rng.standard_normal((37, 129)).astype(np.float16)
    stream = runtime.Stream()
    buf = runtime.DeviceBuffer()
    try:
        buf.copy_from(host, stream)
        back = np.full_like(host, np.nan)
        buf.copy_to(back, stream)
        stream.synchronize()
        np.testing.assert_array_equal(back, host)
    finally:
        buf.free()
        stream.close()
