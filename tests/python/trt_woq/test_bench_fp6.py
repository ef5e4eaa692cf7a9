"""The benchmark's FP6 pieces that run on the CPU: the summary line shows a method asked for by name (fp6_pc)."""

from trt_woq import bench


def test_summary_line_shows_fp6_pc():
    k, n, m = 4096, 4096, 1
    rows = [bench.Row(k, n, m, "cublas_fp16", 40.0, k * n * 2), bench.Row(k, n, m, "int4_g128", 16.0, k * n // 2),
            bench.Row(k, n, m, "fp6_pc", 21.25, n // 4 * (3 * k // 4) * 4 + 2 * n)]
    line = bench.summary_line(rows, k, n, m)
    assert "fp6_pc=21.2" in line or "fp6_pc=21.3" in line
    assert "fp6_pc" not in bench.summary_line(rows[:2], k, n, m)
