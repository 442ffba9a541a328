"""How ci/test.sh hands the suite to its two pytest workers (tests/work_order.py, tests/conftest.py): a test
belongs to its module's unit of work or to its shared unit, and each unit runs whole on one worker."""
import pathlib
import re

import work_order

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_a_test_belongs_to_its_module_or_its_shared_unit():
    assert work_order.unit_of("tests/unit/test_atomic.py::test_x[a::b]") == "unit/test_atomic"
    for name, group in work_order.SHARED.items():
        assert work_order.unit_of(f"tests/{group[0]}.py::test_x") == name


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
