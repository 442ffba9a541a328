"""`train.py --help` and a mistyped flag answer before TensorFlow is imported: at once, and without
TensorFlow's start-up log on stderr. No test hook is a flag: the help shows none, and parsing a command
line changes no module's globals (the faults a test asks for come from the environment, and only
`python -m tf_recipes.operations.faults` reads them)."""
import sys

import pytest

from helpers import run_python
from test_bad_numbers import recipe_parser

RECIPES = ["mnist-cnn", "cassava-resnet", "cityscapes-unet"]
PROBE = """
import runpy, sys
path = sys.argv[1]
sys.argv = [path, *sys.argv[2:]]
try:
    runpy.run_path(path, run_name="__main__")
except SystemExit as stop:
    print(f"exit {stop.code} tensorflow imported: {'tensorflow' in sys.modules}", file=sys.stderr)
"""


@pytest.mark.parametrize("recipe", RECIPES)
def test_help_needs_no_tensorflow(recipe):
    process = run_python("-c", PROBE, f"recipes/{recipe}/train.py", "--help")
    assert process.stderr.strip() == "exit 0 tensorflow imported: False", process.stderr[-2000:]
    assert "--steps-per-loop" in process.stdout and "--join-timeout" in process.stdout


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_mistyped_flag_needs_no_tensorflow(recipe):
    process = run_python("-c", PROBE, f"recipes/{recipe}/train.py", "--max-step", "5", "--bogus")
    assert "unrecognized arguments: --bogus" in process.stderr
    assert process.stderr.strip().endswith("exit 2 tensorflow imported: False"), process.stderr[-2000:]


@pytest.mark.parametrize("recipe", RECIPES)
def test_help_shows_no_test_hook(recipe):
    process = run_python(f"recipes/{recipe}/train.py", "--help")
    assert process.returncode == 0, process.stderr[-2000:]
    assert "--fault-" not in process.stdout and "testing only" not in process.stdout, process.stdout


def module_globals() -> dict[str, dict[str, int]]:
    """Every loaded project module's globals, each as the identity of its value (a rebinding changes it)."""
    return {name: {key: id(value) for key, value in vars(module).items()}
            for name, module in list(sys.modules.items()) if name.split(".")[0] in ("tf_recipes", "tools")}


@pytest.mark.parametrize("recipe", RECIPES)
def test_parsing_sets_no_module_global(recipe):
    parse = recipe_parser(recipe)
    parse([])  # every module the parser needs is loaded
    before = module_globals()
    first = parse(["--seed", "7", "--max-steps", "3", "--lr", "0.5"])
    second = parse(["--seed", "8", "--epochs", "2"])
    assert (first.seed, second.seed) == (7, 8)
    assert module_globals() == before
    assert not [name for name in vars(first) if "fault" in name]
