"""The host-overhead benchmark (ci/benchmark_host_overhead.py) runs, and the README's figures are its
kept measurement (docs/bench/host-overhead.json), with the command that produced them."""
import json
import statistics

from helpers import REPO, assert_ok, run_python

README = REPO / "README.md"
MEASURED = REPO / "docs" / "bench" / "host-overhead.json"
BARE = "bare tf.function loop"


def table_cells(report: dict) -> list[str]:
    return [f"| {median:,.1f} | {statistics.median(ratios):.3f}x | {min(ratios):.3f}x |"
            for median, ratios in zip(report["medians"].values(), report["ratios"].values())]


def test_the_readme_table_is_the_kept_measurement():
    report = json.loads(MEASURED.read_text())
    text = README.read_text()
    assert set(report["medians"]) == {BARE, "recipe loop, --steps-per-loop 1", "recipe loop, --steps-per-loop 10"}
    for cell in table_cells(report):
        assert cell in text, cell
    assert ".venv/bin/python " + " ".join(report["command"]) in text
    assert f"measured on {report['date'][:10]}" in text


def test_the_benchmark_runs_and_reports_every_loop(tmp_path):
    out = tmp_path / "overhead.json"
    process = run_python("ci/benchmark_host_overhead.py", "--batch-size", "2", "--steps", "40", "--warmup", "10",
                         "--rounds", "2", "--loops", "1,4", "--json", str(out), timeout=600)
    assert_ok(process)
    report = json.loads(out.read_text())
    names = [BARE, "recipe loop, --steps-per-loop 1", "recipe loop, --steps-per-loop 4"]
    assert list(report["medians"]) == names
    assert all(len(report["rounds"][name]) == 2 and min(report["rounds"][name]) > 0 for name in names)
    assert report["ratios"][BARE] == [1.0, 1.0]
    for cell in table_cells(report):
        assert cell in process.stdout
    assert "ERROR" not in process.stderr
