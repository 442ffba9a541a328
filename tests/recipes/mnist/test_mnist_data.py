"""mnist-cnn's data paths: the Keras mnist.npz for offline clusters, TFDS and clear errors (what it learns
from the real digits: test_mnist_quality.py)."""

import numpy as np

from helpers import assert_ok, read_results, results_beside, run_python

TRAIN = "recipes/mnist-cnn/train.py"


def write_npz(path, train=512, test=200, arrays=("x_train", "y_train", "x_test", "y_test")):
    rng = np.random.default_rng(0)
    data = {"x_train": rng.integers(0, 256, (train, 28, 28), dtype=np.uint8),
            "y_train": rng.integers(0, 10, train).astype(np.uint8),
            "x_test": rng.integers(0, 256, (test, 28, 28), dtype=np.uint8),
            "y_test": rng.integers(0, 10, test).astype(np.uint8)}
    np.savez(path, **{k: v for k, v in data.items() if k in arrays})


def test_data_dir_with_the_keras_npz_trains_and_evaluates_on_its_test_split(tmp_path):
    write_npz(tmp_path / "mnist.npz")
    process = run_python(TRAIN, "--data-dir", str(tmp_path), "--max-steps", "3", "--batch-size", "64",
                         "--results-dir", str(results_beside(tmp_path)))
    assert_ok(process)
    results = read_results(results_beside(tmp_path))
    assert results["data"] == "mnist"
    assert results["steps_per_epoch"] == 512 // 64
    assert results["final_metrics"]["test"]["examples"] == 200


def test_an_npz_without_the_expected_arrays_is_named(tmp_path):
    write_npz(tmp_path / "mnist.npz", arrays=("x_train", "y_train"))
    process = run_python(TRAIN, "--data-dir", str(tmp_path), "--max-steps", "1",
                         "--results-dir", str(results_beside(tmp_path)))
    assert process.returncode == 2
    assert "mnist.npz lacks arrays ['x_test', 'y_test']" in process.stderr
    assert "Traceback" not in process.stderr


def test_no_data_and_no_network_says_how_to_provide_it(tmp_path):
    # An empty TFDS data dir and a host that cannot be reached: the message, not a long retry loop.
    process = run_python("-m", "tf_recipes.operations.faults", TRAIN, "--data-dir", str(tmp_path), "--max-steps", "1",
                         "--results-dir", str(results_beside(tmp_path)), timeout=120,
                         env={"TF_RECIPES_FAULT_DOWNLOAD_HOST": "unreachable.invalid"})
    assert process.returncode == 2, process.stderr[-2000:]
    assert "mnist.npz" in process.stderr and "--synthetic" in process.stderr
    assert "Traceback" not in process.stderr
    assert not (results_beside(tmp_path) / "results.json").exists()


def test_missing_data_dir_is_named(tmp_path):
    process = run_python(TRAIN, "--data-dir", str(tmp_path / "nope"), "--max-steps", "1")
    assert process.returncode == 2 and f"--data-dir {tmp_path / 'nope'} does not exist" in process.stderr


def test_bad_numbers_get_one_line_errors():
    process = run_python(TRAIN, "--batch-size", "0")
    assert process.returncode == 2 and "--batch-size: 0 must be at least 1" in process.stderr
    process = run_python(TRAIN, "--synthetic", "--batch-size", "20000", "--max-steps", "1")
    assert process.returncode == 2 and "lower --batch-size" in process.stderr
    assert "Traceback" not in process.stderr
