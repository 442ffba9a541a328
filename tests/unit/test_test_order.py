"""How ci/test.sh hands the suite to its two pytest workers (tests/conftest.py): every module named in
SHARED and FIRST exists, none is in two shared units, FIRST names each unit once, and ci/test.sh asks
for the scheduling that reads them."""
import pathlib
import re

import conftest

TESTS = pathlib.Path(__file__).resolve().parents[1]


def modules() -> set[str]:
    return {path.relative_to(TESTS).with_suffix("").as_posix() for path in TESTS.rglob("test_*.py")}


def test_every_shared_module_exists_and_is_in_one_unit():
    named = [module for group in conftest.SHARED.values() for module in group]
    assert sorted(set(named) - modules()) == []
    assert len(named) == len(set(named))
    assert not set(conftest.SHARED) & modules(), "a shared unit is named like a module"


def test_first_names_each_unit_once():
    units = modules() | set(conftest.SHARED)
    assert sorted(set(conftest.FIRST) - units) == []
    assert len(conftest.FIRST) == len(set(conftest.FIRST))
    for group in conftest.SHARED.values():
        assert not set(group) & set(conftest.FIRST), f"name the shared unit in FIRST, not its modules: {group}"


def test_a_test_belongs_to_its_module_or_its_shared_unit():
    assert conftest.unit_of("tests/unit/test_atomic.py::test_x[a::b]") == "unit/test_atomic"
    for name, group in conftest.SHARED.items():
        assert conftest.unit_of(f"tests/{group[0]}.py::test_x") == name


def test_ci_runs_two_workers_with_the_units_in_order():
    script = (TESTS.parent / "ci" / "test.sh").read_text()
    flags = re.search(r"^parallel=\((.*)\)$", script, flags=re.M)
    assert flags and flags.group(1).split() == ["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"]
    runs = [line for line in script.splitlines() if "-m pytest" in line]
    assert len(runs) == 4 and all('-m pytest "${parallel[@]}"' in line for line in runs), runs
