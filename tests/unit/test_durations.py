"""ci/durations.py, which ci/test.sh runs before its last line: each test module's time, summed from the
JUnit XML files that pytest really writes (here from a small suite of its own, run on two xdist workers
as ci/test.sh runs the real one), module fixtures and test classes included."""
import subprocess
import sys
from pathlib import Path

DURATIONS = Path(__file__).resolve().parents[2] / "ci" / "durations.py"
SLOW_FIXTURE = """import time
import pytest

@pytest.fixture(scope="module")
def made_once():
    time.sleep(1.0)

def test_one(made_once):
    pass

class TestMore:
    def test_two(self, made_once):
        time.sleep(0.3)
"""
QUICK = "def test_quick():\n    pass\n"


def run_suite(folder: Path, xml: Path) -> None:
    (folder / "tests" / "integration").mkdir(parents=True)
    (folder / "tests" / "integration" / "test_slow.py").write_text(SLOW_FIXTURE)
    (folder / "tests" / "test_quick.py").write_text(QUICK)
    (folder / "pytest.ini").write_text("[pytest]\n")
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                              f"--junitxml={xml}", "tests"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]


def test_each_module_gets_the_time_of_its_fixture_and_of_its_tests_in_a_class(tmp_path):
    xml = tmp_path / "suite.xml"
    run_suite(tmp_path / "suite", xml)
    process = subprocess.run([sys.executable, str(DURATIONS), str(xml), "--top", "5"], capture_output=True,
                             text=True, timeout=60)
    assert process.returncode == 0, process.stderr
    lines = process.stdout.splitlines()
    assert lines[0].startswith("[durations] the 2 slowest of 2 test modules")
    slow, quick = ([float(line.split()[1]), line.split()[-1]] for line in lines[1:])
    assert slow[1] == "tests/integration/test_slow.py" and quick[1] == "tests/test_quick.py"
    assert slow[0] >= 1  # the 1.3 s it slept, rounded to whole seconds
    assert quick[0] == 0


def test_a_missing_or_broken_file_is_one_line(tmp_path):
    broken = tmp_path / "broken.xml"
    broken.write_text("<testsuites><testsuite>")
    for path in (tmp_path / "missing.xml", broken):
        process = subprocess.run([sys.executable, str(DURATIONS), str(path)], capture_output=True, text=True,
                                 timeout=60)
        assert process.returncode == 1 and process.stdout == ""
        assert process.stderr.startswith("ci/durations.py: cannot read the test times: ")
        assert len(process.stderr.splitlines()) == 1 and "Traceback" not in process.stderr
