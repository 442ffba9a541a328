"""`train.py --help` and a mistyped flag answer before TensorFlow is imported: at once, and without
TensorFlow's start-up log on stderr."""
import pytest

from helpers import run_python

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
