"""The reference loop that ci/test.sh prints and the benchmarks keep beside their times is one program,
ci/reference_loop.py's, so that a report's figure compares with the suite's."""
import ast
import subprocess
import sys
from pathlib import Path

from ci import reference_loop
from ci.bench import cityscapes_rehearsal

REPO = Path(__file__).resolve().parents[2]


def test_the_file_prints_the_seconds_of_its_program():
    printed = subprocess.run([sys.executable, str(REPO / "ci" / "reference_loop.py")], capture_output=True,
                             text=True, check=True).stdout
    assert float(printed) > 0 and printed.strip() == f"{float(printed):.2f}"


def test_the_rehearsal_keeps_what_the_suite_s_reference_loop_prints(tmp_path, monkeypatch):
    # A stand-in ci/reference_loop.py that prints a figure no loop gives: the rehearsal must report it.
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "reference_loop.py").write_text('print("9.87")\n')
    monkeypatch.setattr(cityscapes_rehearsal, "ROOT", tmp_path)
    assert cityscapes_rehearsal.reference_loop() == 9.87


def test_the_cache_benchmark_runs_the_same_program():
    # benchmark_cache.py stands alone in its recipe folder, so it holds the program as text of its own.
    tree = ast.parse((REPO / "recipes" / "cityscapes-unet" / "benchmark_cache.py").read_text())
    held = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            and any(isinstance(target, ast.Name) and target.id == "REFERENCE_LOOP" for target in node.targets)]
    assert held == [reference_loop.PROGRAM]
