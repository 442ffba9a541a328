"""What the library's modules may import: a recipe's train.py pulls in only what trains it (`python -m
ci.imports`), at most each recipe's budget of code lines and nothing of tf_recipes.operations or the
tests; and the layers of pyproject.toml's import-linter contract point one way, an upward import or a cycle
breaking it."""
import os
import shutil
import subprocess
import sys

import pytest

from ci import imports
from helpers import REPO

pytestmark = pytest.mark.repository
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")


@pytest.mark.parametrize("train", sorted(imports.ROOT.glob("recipes/*/train.py")), ids=lambda path: path.parent.name)
def test_a_train_script_pulls_in_its_budget_of_code_lines_at_most_and_no_operations_or_test_module(train):
    files = imports.pulled_in(train)
    assert {"training", "launchers", "__init__"} <= {path.stem for path in files}  # the walk follows imports
    assert not [path for path in files if "operations" in path.relative_to(imports.LIBRARY).parts]
    assert sum(imports.code_lines(path) for path in files) <= imports.BUDGETS[train.parent.name]


def lint_imports(library_parent):
    """lint-imports on pyproject.toml's contract, over the tf_recipes package found in `library_parent`."""
    return subprocess.run([LINT_IMPORTS, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
                          cwd=library_parent, env={**os.environ, "PYTHONPATH": str(library_parent)},
                          capture_output=True, text=True, timeout=120)


def test_the_layers_point_one_way_and_an_upward_import_breaks_the_contract(tmp_path):
    kept = lint_imports(REPO / "common")
    assert kept.returncode == 0 and "1 kept, 0 broken" in kept.stdout, kept.stdout + kept.stderr
    # A copy of the library whose engine imports the command line, as training.py once did
    shutil.copytree(REPO / "common" / "tf_recipes", tmp_path / "tf_recipes")
    with open(tmp_path / "tf_recipes" / "training.py", "a") as handle:
        handle.write("\nfrom tf_recipes.cli import configuration  # noqa: E402\n")
    broken = lint_imports(tmp_path)
    assert broken.returncode == 1 and "tf_recipes.training is not allowed to import tf_recipes.cli" in broken.stdout
