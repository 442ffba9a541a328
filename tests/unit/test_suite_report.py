"""ci/suite_report.py, which ci/test.sh runs after the tests: a tier is green only on all it holds. Here a small
suite of its own runs on two xdist workers, as ci/test.sh runs the real one, with tests/conftest.py's count of
what it collected, and the tally is held against it."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITE = {
    "test_a.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
    "test_b.py": "import pytest\n\n@pytest.mark.full\ndef test_nightly():\n    pass\n\ndef test_three():\n    pass\n",
    # A test that runs pytest itself, as tests/unit/test_test_order.py does: its session selects 1 test.
    "test_c.py": ("import subprocess, sys\n\ndef test_inner_pytest():\n"
                  "    subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',"
                  " '-k', 'test_one', 'test_a.py'], check=True, capture_output=True)\n"),
}


def run_suite(folder: Path, *args: str) -> tuple[Path, Path]:
    """The small suite with tests/conftest.py, under `pytest -n 2 ARGS`: (junit, count file)."""
    folder.mkdir()
    for name, text in SUITE.items():
        (folder / name).write_text(text)
    shutil.copy(REPO / "tests" / "conftest.py", folder / "conftest.py")  # its imports come from tests/
    (folder / "pytest.ini").write_text("[pytest]\nmarkers =\n    full: the full tier\n")
    junit, count = folder / "junit.xml", folder / "collected.txt"
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                              f"--junitxml={junit}", f"--collected-file={count}", *args], cwd=folder,
                             capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (REPO / "tests", REPO)))})
    assert junit.is_file(), process.stdout[-2000:] + process.stderr[-2000:]
    return junit, count


def report(junit: Path, *counts: Path, extra=()) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "ci" / "suite_report.py"), "--tier", "per-push",
                           "--collected", *map(str, counts), *extra, "--junit", str(junit)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def per_push(tmp_path_factory):
    return run_suite(tmp_path_factory.mktemp("suite") / "per-push", "-m", "not full")


def test_the_selection_is_counted_once_per_session_and_a_whole_run_is_green(per_push):
    junit, count = per_push
    # The full-tier test deselected; both workers wrote the same number; the inner pytest wrote nothing.
    assert count.read_text() == "4\n"
    process = report(junit, count)
    assert process.returncode == 0, process.stderr
    assert process.stderr.strip() == "[test] the per-push tier: 4 collected, 4 ran: 4 passed, 0 failed, 0 skipped"


def test_fewer_reported_than_collected_is_red(per_push, tmp_path):
    junit, _ = per_push
    more = tmp_path / "collected.txt"
    more.write_text("5\n")  # one test never reported: a worker that died, a session that stopped early
    process = report(junit, more)
    assert process.returncode == 1
    assert "not green: 1 of the 5 tests collected never reported a result" in process.stderr


def test_a_skip_is_red(tmp_path):
    SUITE["test_d.py"] = "import pytest\n\ndef test_skipped():\n    pytest.skip('no engine here')\n"
    try:
        junit, count = run_suite(tmp_path / "skips")
    finally:
        del SUITE["test_d.py"]
    process = report(junit, count)
    assert process.returncode == 1
    assert "6 collected, 6 ran: 5 passed, 0 failed, 1 skipped; not green: 1 skipped" in process.stderr


def test_nothing_collected_or_no_count_is_red(per_push, tmp_path):
    junit, _ = per_push
    zero = tmp_path / "zero.txt"
    zero.write_text("0\n")
    assert "no test was collected" in report(junit, zero).stderr
    missing = report(junit, tmp_path / "missing.txt")
    assert missing.returncode == 1 and missing.stderr.startswith("ci/suite_report.py: cannot read what the tests ran")
    assert "Traceback" not in missing.stderr


def test_the_report_holds_the_tally_the_times_and_the_machine(per_push, tmp_path):
    junit, count = per_push
    out = tmp_path / "report"
    process = report(junit, count, extra=("--report", str(out), "--wall", "100", "--setup", "40", "--cpu", "180",
                                          "--reference", "0.7", "--command", "bash ci/test.sh --full"))
    assert process.returncode == 0, process.stderr
    kept = json.loads((out / "report.json").read_text())
    assert kept["tests"] == {"ran": 4, "passed": 4, "failed": 0, "skipped": 0} and kept["collected"] == 4
    assert kept["verdict"] == "green" and kept["seconds"] == {"wall": 100, "setup": 40, "cpu": 180}
    assert kept["machine"]["reference_loop_seconds"] == 0.7 and len(kept["git"]["commit"]) == 40
    assert {module for module, _ in kept["slowest_modules"]} == {"test_a.py", "test_b.py", "test_c.py"}
    summary = (out / "summary.md").read_text()
    assert "4 passed, 0 failed, 0 skipped, of 4 collected" in summary and "reference loop 0.7 s" in summary


def test_the_kept_report_of_the_full_tier_is_a_green_full_run_and_its_summary_is_made_from_it():
    """docs/nightly/suite, as `invoke nightly --suite` wrote it: a full tier green on all it collected, and a
    summary.md that is what ci/suite_report.py makes of its report.json (neither edited by hand)."""
    from ci import suite_report

    kept = REPO / "docs" / "nightly" / "suite"
    report = json.loads((kept / "report.json").read_text())
    assert (report["tier"], report["verdict"]) == ("full", "green")
    counts = report["tests"]
    assert counts["passed"] == counts["ran"] == report["collected"] and counts["failed"] == counts["skipped"] == 0
    assert report["command"].startswith("bash ci/test.sh --full") and len(report["git"]["commit"]) == 40
    assert report["seconds"]["wall"] > report["seconds"]["setup"] > 0
    assert report["machine"]["reference_loop_seconds"] > 0
    assert (kept / "summary.md").read_text() == suite_report.summary_markdown(report)
