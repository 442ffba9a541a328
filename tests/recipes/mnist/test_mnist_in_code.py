"""A Trainer made in Python, without a command line: docs/library.md's five lines, run as they are written
there (in a process of their own, with the imports and the digits the text names), train, evaluate and
write the same results.json a train.py run writes."""
import json
import re

from helpers import REPO, assert_ok, run_python

PREAMBLE = """
import sys
import keras
sys.path[:0] = ["tests"]
from helpers import recipe_module
from tf_recipes.config import RunConfig
from tf_recipes.launchers import create_launcher
from tf_recipes.training import Trainer
train, data = recipe_module("mnist-cnn", "train"), recipe_module("mnist-cnn", "data")
x_train, y_train, x_test, y_test = data.synthetic_mnist(42, train=6_400, test=500)  # an epoch: 100 steps of 64
keras.utils.set_random_seed(42)
"""


def documented_lines() -> str:
    text = (REPO / "docs" / "library.md").read_text()
    section = text[text.index("## A Trainer in code"):text.index("## Layers")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_the_five_documented_lines_train_evaluate_and_write_results(tmp_path):
    code = documented_lines()
    assert len(code.strip().splitlines()) == 5
    assert_ok(run_python("-c", PREAMBLE + code.replace("/tmp/mnist-in-code", str(tmp_path / "run")), timeout=300))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (results["recipe"], results["steps"], results["global_batch"]) == ("mnist-cnn", 100, 64)
    assert results["replicas_in_sync"] and results["final_metrics"]["test"]["examples"] == 500
    # the bright patch's position is the label: learnt far above chance (0.1) in 100 steps
    assert results["final_metrics"]["test"]["accuracy"] > 0.5
    assert (tmp_path / "run" / "final.weights.h5").is_file() and not (tmp_path / "run" / "export").exists()
