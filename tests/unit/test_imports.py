"""A recipe's train.py pulls in only what trains it (`python -m ci.imports`): at most 2,750 lines of the
library, and none of the modules that serve operations or the tests."""
import pytest

from ci import imports

pytestmark = pytest.mark.repository
NOT_IN_A_RUN = {"spawn", "preflight", "predicting", "pipeline_bench", "constraints", "faults"}


@pytest.mark.parametrize("train", sorted(imports.ROOT.glob("recipes/*/train.py")), ids=lambda path: path.parent.name)
def test_a_train_script_pulls_in_at_most_2750_lines_and_no_operations_or_test_module(train):
    files = imports.pulled_in(train)
    assert {"training", "launchers", "__init__"} <= {path.stem for path in files}  # the walk follows imports
    assert not {path.stem for path in files} & NOT_IN_A_RUN
    assert sum(imports.lines(path) for path in files) <= 2750
