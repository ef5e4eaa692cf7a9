"""A read-only stream of a buffer's bytes on the GPU (Triton): the benchmark's reference for what reading a method's
weight bytes costs (python -m trt_woq.bench). Imported only by the benchmark, on a machine with torch and Triton."""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 4096  # int32 per program and iteration: 16 KB, 64 bytes (four 16-byte loads) per thread at 8 warps
PROGRAMS_PER_SM = 4  # 64 KB in flight per SM


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))  # one word per program, so the loads cannot be dropped


def read_all(x, out, sms: int) -> None:
    """Reads every int32 of the contiguous CUDA tensor ``x`` once; ``out``: int32 [sms * PROGRAMS_PER_SM]."""
    _read_kernel[(sms * PROGRAMS_PER_SM,)](x, out, x.numel(), BLOCK=BLOCK, num_warps=8)
