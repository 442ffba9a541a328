"""The host-overhead figures in docs/benchmarks.md are the kept measurement (docs/bench/host-overhead.json), with
the command that produced them. The benchmark (ci/bench/host_overhead.py) runs in
tests/integration/test_host_overhead.py."""
import json

from bench_reports import BARE, table_cells
from helpers import REPO

DOC = REPO / "docs" / "benchmarks.md"
MEASURED = REPO / "docs" / "bench" / "host-overhead.json"


def test_the_docs_table_is_the_kept_measurement():
    report = json.loads(MEASURED.read_text())
    text = DOC.read_text()
    assert set(report["medians"]) == {BARE, "recipe loop, --steps-per-loop 1", "recipe loop, --steps-per-loop 10"}
    for cell in table_cells(report):
        assert cell in text, cell
    assert ".venv/bin/python " + " ".join(report["command"]) in text
    assert f"measured on {report['date'][:10]}" in text
