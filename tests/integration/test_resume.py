"""Checkpoints and --resume: a run stopped at step 10 and resumed to step 20 ends with the same
weights, bit for bit, as a run that went to step 20 in one go (same data order, restored optimizer
state and dropout random state). Dropout is on, as in the default model."""
import numpy as np
import pytest

from helpers import assert_ok, run_python
from test_mnist_launchers import load_weights

pytestmark = pytest.mark.slow
ARGS = ["recipes/mnist-cnn/train.py", "--synthetic", "--batch-size", "32", "--checkpoint-every", "5"]


def test_resume_continues_the_same_run(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert_ok(run_python(*ARGS, "--max-steps", "20", "--results-dir", str(whole)))
    assert_ok(run_python(*ARGS, "--max-steps", "10", "--results-dir", str(parts)))
    resumed = run_python(*ARGS, "--max-steps", "20", "--results-dir", str(parts), "--resume")
    assert_ok(resumed)
    assert "resumed from" in resumed.stdout and "at step 10" in resumed.stdout
    expected, got = load_weights(whole), load_weights(parts)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_existing_checkpoints_are_not_overwritten_without_resume(tmp_path):
    assert_ok(run_python(*ARGS, "--max-steps", "5", "--results-dir", str(tmp_path)))
    again = run_python(*ARGS, "--max-steps", "5", "--results-dir", str(tmp_path))
    assert again.returncode == 2
    assert "already holds checkpoints" in again.stderr and "--resume" in again.stderr
    assert "Traceback" not in again.stderr
