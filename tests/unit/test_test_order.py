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
    assert len(runs) == 1 and '-m pytest "${parallel[@]}"' in runs[0], runs
