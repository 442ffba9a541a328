"""invoke bench run for real on mnist-cnn: every launcher measured, and the table, JSON and PNG
written. Its pure parts: tests/unit/test_bench.py."""
import json

import pytest

from bench_reports import png_size
from ci.bench import report as bench
from helpers import assert_ok, run_invoke

# In the full tier only: a benchmark; speed is judged by benchmarks every night, not by a push's test.
pytestmark = pytest.mark.full

PNG_SIZE = tuple(round(inches * bench.FIGURE_DPI) for inches in bench.FIGURE_SIZE_INCHES)


@pytest.mark.slow
def test_bench_measures_every_launcher_and_writes_table_json_and_png(tmp_path, require_horovod):
    out = tmp_path / "bench"
    process = run_invoke("bench", "mnist-cnn", "--replicas", "1,2", "--rounds", "1", "--out", str(out),
                         "--", "--synthetic", "--max-steps", "8", timeout=600)
    assert_ok(process)
    expected = [("single", 1), ("mirrored", 1), ("multiworker", 1), ("horovod", 1),
                ("mirrored", 2), ("multiworker", 2), ("horovod", 2)]

    report = json.loads((out / "bench.json").read_text())
    assert [(run["launcher"], run["replicas"]) for run in report["runs"]] == expected
    for run in report["runs"]:
        assert run["images_per_sec"] > 0 and run["replicas_in_sync"] and "error" not in run
        assert run["load_average_1min"] >= 0
        assert run["global_batch"] == 128 * run["replicas"] and run["timed_steps"] == 3  # 8 steps - 5 warm-up
    for row in report["rows"]:
        assert row["images_per_sec_median"] == row["images_per_sec_rounds"][0]
        assert row["efficiency"] == pytest.approx(row["speedup"] / row["replicas"])
    assert report["command"] == ("invoke bench mnist-cnn --replicas 1,2 --rounds 1 --out "
                                 f"{out} -- --synthetic --max-steps 8")
    assert report["versions"]["tensorflow"] == "2.17.1" and report["machine"]["cpus"] >= 1
    assert report["date"].endswith("UTC") and report["train_args"] == ["--synthetic", "--max-steps", "8"]
    assert "in memory" in report["input"]["note"]

    table = (out / "bench.md").read_text()
    for launcher, replicas in expected:
        row = next(row for row in report["rows"] if (row["launcher"], row["replicas"]) == (launcher, replicas))
        median = bench._number(row["images_per_sec_median"])
        assert f"| {launcher} | {replicas} | {128 * replicas} | {median} |" in table
    assert table in process.stdout  # printed as well
    assert png_size(out / "bench.png") == PNG_SIZE
    assert not (out / "runs").exists()  # run folders are removed after a successful benchmark
