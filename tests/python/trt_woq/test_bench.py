"""Tests of the benchmark: its pure parts on the CPU (the markdown rendering of a saved run, the shape parser) and the
interleaved timing on a GPU (skipped without torch CUDA)."""

import numpy as np
import pytest

from trt_woq import bench


def _row(k, n, m, method, us, weight_bytes):
    return dict(k=k, n=n, m=m, method=method, us=us, weight_bytes=weight_bytes, error=None)


def test_markdown_ratios_bandwidth_and_clock():
    rng = np.random.default_rng()
    k, n, m = 4096, int(rng.choice([4096, 6144])), int(rng.choice([1, 4, 16]))
    cublas_us, int4_us = float(rng.uniform(10, 20)), float(rng.uniform(3, 9))
    int4_bytes = n // 4 * k // 2 * 4 + (k // 128) * n * 2
    copy_gbps = float(rng.uniform(2000, 3000))
    result = {"copy_gbps": copy_gbps, "sm_mhz": {f"{k}x{n}/m{m}": 1755},
              "rows": [_row(k, n, m, "cublas_fp16", cublas_us, k * n * 2),
                       _row(k, n, m, "int4_g128", int4_us, int4_bytes)]}
    lines = bench.markdown(result).splitlines()
    assert len(lines) == 3
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = dict(zip(header, (c.strip() for c in lines[2].strip("|").split("|"))))
    assert cells["K x N"] == f"{k} x {n}" and cells["M"] == str(m)
    assert cells["INT4 / cuBLAS"] == f"{cublas_us / int4_us:.2f}x"
    gbps = int4_bytes / int4_us / 1e3
    assert cells["INT4 GB/s (% copy)"] == f"{gbps:.0f} ({100 * gbps / copy_gbps:.0f}%)"
    assert cells["SM MHz"] == "1755"
    assert cells["ours INT8 pc"] == "n/a" and cells["torch int4"] == "n/a"


def test_markdown_without_clock_record():
    # Runs saved before the clock was recorded render with n/a.
    result = {"copy_gbps": 2400.0, "rows": [_row(4096, 4096, 1, "int4_g128", 7.5, 1 << 23)]}
    assert bench.markdown(result).splitlines()[2].rstrip().endswith("| n/a |")


@pytest.mark.parametrize("text, shapes", [("4096x6144", [(4096, 6144)]),
                                          ("4096x4096,14336x4096", [(4096, 4096), (14336, 4096)])])
def test_parse_shapes(text, shapes):
    assert bench.parse_shapes(text) == shapes


def test_interleaved_timing_orders_methods_and_isolates_a_failure():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch")
    rng = np.random.default_rng()
    short, long = int(rng.integers(2_000, 4_000)), int(rng.integers(200_000, 400_000))  # spin-loop clock cycles

    def broken():
        raise RuntimeError("setup failed")

    fast, slow, failed = bench.time_interleaved([[lambda: torch.cuda._sleep(short)],
                                                 [lambda: torch.cuda._sleep(long)], [broken]], min_calls=4, replays=5)
    assert isinstance(failed, RuntimeError)
    assert 0 < fast < slow
    # ~1.3-2 GHz: the long spin is tens of microseconds per call, far above the short one.
    assert slow > 10 * fast
    with pytest.raises(RuntimeError, match="setup failed"):
        bench.time_calls([broken])


def test_dumps_is_one_line_per_key_and_row_and_round_trips():
    import json

    rng = np.random.default_rng()
    rows = [_row(4096, 4096, int(m), "int4_g128", float(rng.uniform(3, 9)), 1 << 23) for m in rng.integers(1, 99, 5)]
    result = {"device": "H100", "copy_gbps": float(rng.uniform(2000, 3000)), "sm_mhz": {"4096x4096/m1": 1980},
              "rows": rows, "command": "python -m trt_woq.bench"}
    text = bench.dumps(result)
    assert json.loads(text) == result
    assert len(text.splitlines()) == 2 + (len(result) - 1) + 2 + len(rows)  # braces, keys, "rows": [ ... ], rows
