"""How ci/test.sh hands the suite to its two pytest workers (tests/work_order.py): every module named in
SHARED and FIRST exists, none is in two shared units, FIRST names each unit once, and ci/test.sh asks
for the scheduling that reads them."""
import pathlib
import re

import work_order

TESTS = pathlib.Path(__file__).resolve().parents[1]


def modules() -> set[str]:
    return {path.relative_to(TESTS).with_suffix("").as_posix() for path in TESTS.rglob("test_*.py")}


def test_every_shared_module_exists_and_is_in_one_unit():
    named = [module for group in work_order.SHARED.values() for module in group]
    assert sorted(set(named) - modules()) == []
    assert len(named) == len(set(named))
    assert not set(work_order.SHARED) & modules(), "a shared unit is named like a module"


def test_first_names_each_unit_once():
    units = modules() | set(work_order.SHARED)
    assert sorted(set(work_order.FIRST) - units) == []
    assert len(work_order.FIRST) == len(set(work_order.FIRST))
    for group in work_order.SHARED.values():
        assert not set(group) & set(work_order.FIRST), f"name the shared unit in FIRST, not its modules: {group}"


def test_a_test_belongs_to_its_module_or_its_shared_unit():
    assert work_order.unit_of("tests/unit/test_atomic.py::test_x[a::b]") == "unit/test_atomic"
    for name, group in work_order.SHARED.items():
        assert work_order.unit_of(f"tests/{group[0]}.py::test_x") == name


def test_ci_runs_two_workers_with_the_units_in_order():
    script = (TESTS.parent / "ci" / "test.sh").read_text()
    flags = re.search(r"^parallel=\((.*)\)$", script, flags=re.M)
    assert flags and flags.group(1).split() == ["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"]
    runs = [line for line in script.splitlines() if "-m pytest" in line]
    # The whole suite, and the unit tier beside the set-up: both on the two workers.
    assert len(runs) == 2 and all('-m pytest "${parallel[@]}"' in run for run in runs), runs


def test_two_workers_run_each_module_whole_on_one_of_them():
    """The scheduler tests/conftest.py plugs into pytest-xdist really keeps a unit on one worker
    (xdist's own grouping by mark silently stopped grouping under pytest 9.2)."""
    import subprocess
    import sys

    modules = ["tests/unit/test_atomic.py", "tests/unit/test_gpu_request_env.py", "tests/unit/test_help.py"]
    process = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadscope",
                              "--no-loadscope-reorder", "-v", "-p", "no:cacheprovider", *modules],
                             cwd=TESTS.parent, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .*?PASSED (tests/\S+?\.py)::", process.stdout, flags=re.M)
    workers = {module: {worker for worker, path in ran if path == module} for module in modules}
    assert all(len(found) == 1 for found in workers.values()), workers
    assert len({worker for worker, _ in ran}) == 2, "both workers should have taken work"
