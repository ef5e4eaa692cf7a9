"""Tests of the benchmark: its pure parts on the CPU (the markdown rendering of a saved run, the M-range summary, the
default M grid, the shape parser) and the interleaved timing on a GPU (skipped without torch CUDA)."""

import numpy as np
import pytest

from trt_woq import bench


def _row(k, n, m, method, us, weight_bytes):
    return dict(k=k, n=n, m=m, method=method, us=us, weight_bytes=weight_bytes, error=None)


def _cell_map(table: str, row: int) -> dict:
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return dict(zip(header, (c.strip() for c in lines[2 + row].strip("|").split("|"))))


def test_markdown_ratios_bandwidth_and_clock():
    rng = np.random.default_rng()
    k, n, m = 4096, int(rng.choice([4096, 6144])), int(rng.choice([1, 4, 16, 333]))
    cublas_us, marlin_us, int4_us = (float(v) for v in rng.uniform([10, 5, 3], [20, 9, 9]))
    int4_bytes = n // 4 * k // 2 * 4 + (k // 128) * n * 2
    read_gbps = float(rng.uniform(2500, 3300))
    result = {"copy_gbps": 2400.0, "sm_mhz": {f"{k}x{n}/m{m}": 1755},
              "read_gbps": {f"{k}x{n}": {"int4_g128": read_gbps}},
              "rows": [_row(k, n, m, "cublas_fp16", cublas_us, k * n * 2),
                       _row(k, n, m, "marlin", marlin_us, k * n // 2 + (k // 128) * n * 2),
                       _row(k, n, m, "int4_g128", int4_us, int4_bytes)]}
    table = bench.markdown(result)
    assert len(table.splitlines()) == 3
    cells = _cell_map(table, 0)
    assert cells["K x N"] == f"{k} x {n}" and cells["M"] == str(m)
    assert cells["INT4 / cuBLAS"] == f"{cublas_us / int4_us:.2f}x"
    assert cells["INT4 / Marlin"] == f"{marlin_us / int4_us:.2f}x"
    gbps, cublas_gbps = int4_bytes / int4_us / 1e3, k * n * 2 / cublas_us / 1e3
    assert cells["INT4 BW % cuBLAS"] == f"{100 * gbps / cublas_gbps:.0f}%"
    assert cells["INT4 BW % read"] == f"{100 * gbps / read_gbps:.0f}%"
    assert cells["SM MHz"] == "1755"
    assert "ours INT8 pc" not in cells and "torch int4" not in cells  # methods the run did not include
    assert cells["INT8 / cuBLAS"] == "n/a" and cells["INT8 BW % read"] == "n/a"


def test_markdown_without_clock_or_read_record():
    # Runs saved before the clock and the read streams were recorded render with n/a.
    result = {"copy_gbps": 2400.0, "rows": [_row(4096, 4096, 1, "int4_g128", 7.5, 1 << 23)]}
    cells = _cell_map(bench.markdown(result), 0)
    assert cells["SM MHz"] == "n/a" and cells["INT4 BW % read"] == "n/a" and cells["INT4 BW % cuBLAS"] == "n/a"


def test_default_m_grid():
    assert list(bench.M_VALUES) == list(range(1, 17)) + [24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512,
                                                          640, 768, 896, 1024, 2048, 4096]


def _geomean(v):
    return float(np.exp(np.mean(np.log(v))))


def test_summary_min_and_geomean_per_m_range():
    rng = np.random.default_rng()
    shapes = [(4096, 4096), (14336, 4096)]
    # Range edges on both sides (16 / 17, 128 / 129, 1023 / 1024) and a random inner M of each range.
    ms = [1, 16, 17, 128, 129, 1023, 1024, int(rng.integers(2, 16)), int(rng.integers(18, 128)),
          int(rng.integers(130, 1023)), int(rng.integers(1025, 5000))]
    rows, expect = [], {}
    for k, n in shapes:
        for m in ms:
            c, mar, i4, i8 = (float(v) for v in rng.uniform(1, 100, 4))
            rows += [_row(k, n, m, "cublas_fp16", c, 1), _row(k, n, m, "int4_g128", i4, 1),
                     _row(k, n, m, "int8_pc", i8, 1)]
            if m != 17:  # Marlin missing at one M: left out of its ratios, not a zero
                rows.append(_row(k, n, m, "marlin", mar, 1))
            rng_label = "1-16" if m <= 16 else "17-128" if m <= 128 else "129-1023" if m <= 1023 else ">=1024"
            e = expect.setdefault((k, n, rng_label), {"c": [], "mar": [], "c8": []})
            e["c"].append(c / i4)
            e["c8"].append(c / i8)
            if m != 17:
                e["mar"].append(mar / i4)
    rows.append(dict(k=4096, n=4096, m=64, method="marlin", us=None, weight_bytes=0, error="RuntimeError: x"))
    summary = bench.summarize({"rows": rows})
    assert len(summary) == len(shapes) * 4
    for entry in summary:
        e = expect[(entry["k"], entry["n"], entry["m_range"])]
        for key, vals in (("int4_vs_cublas", e["c"]), ("int4_vs_marlin", e["mar"]), ("int8_vs_cublas", e["c8"])):
            assert entry[key]["n"] == len(vals)
            assert entry[key]["min"] == pytest.approx(min(vals), rel=1e-12)
            assert entry[key]["geomean"] == pytest.approx(_geomean(vals), rel=1e-12)
    text = bench.summary_table({"rows": rows})
    assert len(text.splitlines()) == 2 + len(summary)
    first = _cell_map(text, 0)
    e = expect[(4096, 4096, "1-16")]["c"]
    assert first["INT4 g128 x cuBLAS FP16 (min / geomean)"] == f"{min(e):.2f}x / {_geomean(e):.2f}x"


def test_summary_leaves_out_empty_ranges_and_missing_methods():
    rows = [_row(4096, 4096, 333, "cublas_fp16", 60.0, 1), _row(4096, 4096, 333, "int4_g128", 75.0, 1)]
    (entry,) = bench.summarize({"rows": rows})
    assert entry["m_range"] == "129-1023" and entry["int4_vs_cublas"]["min"] == pytest.approx(0.8)
    assert entry["int4_vs_marlin"] is None and entry["int8_vs_cublas"] is None
    assert "n/a" in bench.summary_table({"rows": rows}).splitlines()[2]


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
    # Distinct M: rows of one problem (K x N x M) share a line.
    ms = rng.choice(np.arange(1, 99), 5, replace=False)
    rows = [_row(4096, 4096, int(m), "int4_g128", float(rng.uniform(3, 9)), 1 << 23) for m in ms]
    result = {"device": "H100", "copy_gbps": float(rng.uniform(2000, 3000)), "sm_mhz": {"4096x4096/m1": 1980},
              "rows": rows, "command": "python -m trt_woq.bench"}
    text = bench.dumps(result)
    assert json.loads(text) == result
    assert len(text.splitlines()) == 2 + (len(result) - 1) + 2 + len(rows)  # braces, keys, "rows": [ ... ], rows


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_markdown_of_a_saved_run_and_of_other_files(capsys, tmp_path):
    saved = tmp_path / "run.json"
    bench.write_whole(str(saved), bench.dumps({"rows": [_row(4096, 4096, 1, "int4_g128", 5.0, 1 << 23)]}))
    assert bench.main(["--markdown", str(saved)]) == 0 and "4096 x 4096" in capsys.readouterr().out
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07\x90\xff")
    (tmp_path / "other.json").write_text('{"rows": 3}')
    for name, expect in (("missing.json", "no such file"), ("model.onnx", "not a run saved by"),
                         ("other.json", "needs \"rows\""), (".", "is a folder")):
        assert bench.main(["--markdown", str(tmp_path / name)]) == 2
        assert expect in _one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "other.json", "run.json"]


@pytest.mark.parametrize("module, option", [("bench", "--json"), ("bench_conv", "--json"),
                                            ("bench_conv", "--profile")])
def test_output_in_a_missing_folder_is_refused_before_the_run(capsys, tmp_path, module, option):
    import importlib

    main = importlib.import_module(f"trt_woq.{module}").main
    assert main([option, str(tmp_path / "no" / "out.json")]) == 2
    assert "output folder" in _one_error_line(capsys)
    assert main([option, str(tmp_path)]) == 2
    assert "is a folder" in _one_error_line(capsys)


def test_bench_conv_refuses_an_unknown_column_before_the_run(capsys):
    from trt_woq import bench_conv

    assert bench_conv.main(["--variants", "wgmma,nope"]) == 2
    line = _one_error_line(capsys)
    assert "nope" in line and "wgmma_nhwc" in line  # names the bad column and lists the known ones
