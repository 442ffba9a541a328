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


def test_the_modules_of_a_shared_unit_run_on_one_worker(tmp_path):
    """SHARED's modules use one thing that serves one test at a time (the SLURM cluster): under the scheduler
    tests/conftest.py plugs in, they run on one worker, one after the other, while the other worker takes
    the rest. Plain --dist loadscope would hand them out as separate modules, to both workers at once."""
    import os
    import shutil
    import subprocess
    import sys

    suite = tmp_path / "suite"
    (suite / "tests").mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", suite / "tests" / "conftest.py")  # its imports come from tests/
    (suite / "pytest.ini").write_text("[pytest]\n")
    modules = [*work_order.SHARED["slurm"], "integration/test_other", "integration/test_more"]
    for module in modules:
        path = suite / "tests" / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import time\n\n" + "".join(f"def test_{n}():\n    time.sleep(0.2)\n\n" for n in range(3)))
    imports = os.pathsep.join([str(TESTS), str(TESTS.parent)])
    process = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadscope",
                              "--no-loadscope-reorder", "-v", "-p", "no:cacheprovider", "tests"], cwd=suite,
                             capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": imports})
    assert process.returncode == 0, process.stdout[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .*?PASSED tests/(\S+?)\.py::", process.stdout, flags=re.M)
    shared = {worker for worker, module in ran if module in work_order.SHARED["slurm"]}
    assert len(ran) == 3 * len(modules) and len(shared) == 1, ran
