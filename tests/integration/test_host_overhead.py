"""The host-overhead benchmark (ci/bench/host_overhead.py) runs and reports every loop."""
import json

import pytest

from bench_reports import BARE, table_cells
from error_checks import without_tf_log
from helpers import assert_ok, run_python

# In the full tier only: a benchmark; speed is judged by benchmarks every night, not by a push's test.
pytestmark = pytest.mark.full


def test_the_benchmark_runs_and_reports_every_loop(tmp_path):
    out = tmp_path / "overhead.json"
    process = run_python("-m", "ci.bench.host_overhead", "--batch-size", "2", "--steps", "40", "--warmup", "10",
                         "--rounds", "2", "--loops", "1,4", "--json", str(out), timeout=600)
    assert_ok(process)
    report = json.loads(out.read_text())
    names = [BARE, "recipe loop, --steps-per-loop 1", "recipe loop, --steps-per-loop 4"]
    assert list(report["medians"]) == names
    assert all(len(report["rounds"][name]) == 2 and min(report["rounds"][name]) > 0 for name in names)
    assert report["ratios"][BARE] == [1.0, 1.0]
    for cell in table_cells(report):
        assert cell in process.stdout
    assert "ERROR" not in without_tf_log(process.stderr)
