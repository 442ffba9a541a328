"""What mnist-cnn learns, measured as it trains: the real digits reach a target, and the evaluation during
training (--eval-every, --target) records a curve that changes nothing it trains and that a resume continues."""
import pathlib

import h5py
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from error_checks import TF_LOG_LINE
from ci import results as results_section
from tf_recipes import contract
from helpers import REPO, assert_ok, read_results, run_python

TRAIN = "recipes/mnist-cnn/train.py"
SYNTHETIC = [TRAIN, "--synthetic", "--batch-size", "32", "--log-every", "5"]
# The real digits in the Keras layout: every developer's machine and CI have them beside the repository.
REAL_MNIST = REPO.parent / "shared" / "data" / "mnist"


def load_weights(results_dir) -> dict:
    arrays = {}
    with h5py.File(results_dir / "final.weights.h5") as handle:
        handle.visititems(
            lambda name, item: arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None)
    return arrays


def without_timing(curve):
    return [{k: v for k, v in point.items() if k != "seconds"} for point in curve]


@pytest.mark.slow
@pytest.mark.full  # what it learns on the real digits, the night's; every push runs --target on generated ones
def test_real_mnist_reaches_its_target_and_records_the_curve(tmp_path):
    """The defaults on the 60,000 real training digits, evaluated every quarter epoch and stopped at the first
    evaluation of the 10,000 test digits at 98% or more (within the first epoch or so)."""
    assert (REAL_MNIST / "mnist.npz").is_file(), f"{REAL_MNIST}/mnist.npz is missing: the real digits (its README)"
    process = run_python(TRAIN, "--data-dir", str(REAL_MNIST), "--target", "accuracy=0.98", "--eval-every", "117",
                         "--no-export", "--log-every", "100", "--results-dir", str(tmp_path), timeout=1800)
    assert_ok(process)
    results = read_results(tmp_path)
    curve, accuracy = results["curve"], results["final_metrics"]["test"]["accuracy"]
    assert accuracy >= 0.98 and results["final_metrics"]["test"]["examples"] == 10_000
    assert results["target"] == "accuracy>=0.98" and results["target_step"] == results["steps"] == curve[-1]["step"]
    assert [p["step"] for p in curve] == [117 * (i + 1) for i in range(len(curve))]
    assert [p["accuracy"] >= 0.98 for p in curve] == [False] * (len(curve) - 1) + [True]
    assert curve[-1]["accuracy"] == accuracy and curve[-1]["seconds"] == results["time_to_target"]
    assert results["steps"] < results["steps_per_epoch"] * 2  # the target ended it long before its epochs
    assert f"target accuracy>=0.98 reached at step {results['steps']}" in process.stdout
    # The README's Results section is made from such a results.json
    majority = results["final_metrics"]["test"]["majority_accuracy"]
    assert 0.1 <= majority < 0.2  # the most frequent digit of the 10,000 is about a tenth of them
    section = results_section.render("mnist-cnn", results)
    assert f"**{accuracy:.4f}** | {majority:.4f}" in section and "--target accuracy=0.98" in section


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Synthetic digits, 20 steps: evaluated every 5 steps, not evaluated, and stopped at step 10 then resumed."""
    tmp = tmp_path_factory.mktemp("evaluation")
    made = {}
    for name, args in (("every5", ["--eval-every", "5", "--max-steps", "20"]),
                       ("none", ["--eval-every", "0", "--max-steps", "20"]),
                       ("parts", ["--eval-every", "5", "--max-steps", "10"]),
                       ("parts", ["--eval-every", "5", "--max-steps", "20", "--resume"])):
        made[name] = run_python(*SYNTHETIC, *args, "--no-export", "--results-dir", str(tmp / name))
        assert_ok(made[name])
    return tmp


def test_the_curve_has_a_point_every_n_steps_in_results_and_tensorboard(runs):
    results = read_results(runs / "every5")
    curve = results["curve"]
    assert [p["step"] for p in curve] == [5, 10, 15, 20] and results["eval_every"] == 5
    assert [p["examples_seen"] for p in curve] == [5 * 32, 10 * 32, 15 * 32, 20 * 32]
    assert all(0 < a["seconds"] < b["seconds"] for a, b in zip(curve, curve[1:], strict=False))
    assert curve[-1]["accuracy"] == results["final_metrics"]["test"]["accuracy"]
    events = EventAccumulator(str(runs / "every5" / "tensorboard" / "eval"))
    events.Reload()
    scalars = {name: [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events.Tensors(name)]
               for name in ("accuracy", "loss")}
    assert [step for step, _ in scalars["accuracy"]] == [5, 10, 15, 20]
    assert [value for _, value in scalars["accuracy"]] == pytest.approx([p["accuracy"] for p in curve])
    assert read_results(runs / "none")["curve"] == [{**read_results(runs / "none")["curve"][-1]}]
    assert read_results(runs / "none")["curve"][-1]["step"] == 20


def test_evaluating_during_training_changes_nothing_it_trains(runs):
    evaluated, plain = load_weights(runs / "every5"), load_weights(runs / "none")
    for name in plain:
        np.testing.assert_array_equal(evaluated[name], plain[name], err_msg=name)
    assert read_results(runs / "every5")["replica_fingerprints"] == read_results(runs / "none")["replica_fingerprints"]


def test_a_resumed_run_continues_the_curve_exactly(runs):
    whole, parts = read_results(runs / "every5"), read_results(runs / "parts")
    assert without_timing(parts["curve"]) == without_timing(whole["curve"])
    assert parts["replica_fingerprints"] == whole["replica_fingerprints"]
    # The points before the stop keep the time they were taken at; the later ones count on from there.
    first = read_results(runs / "parts")["curve"]
    assert first[1]["seconds"] <= first[2]["seconds"]


def test_a_target_ends_the_run_and_a_resume_of_it_has_nothing_to_do(tmp_path):
    args = [*SYNTHETIC, "--eval-every", "5", "--max-steps", "40", "--results-dir", str(tmp_path)]
    # Chance is 10%; the patches are learnt within a few steps, long before step 40.
    reached = run_python(*args, "--target", "accuracy=0.5")
    assert_ok(reached)
    results = read_results(tmp_path)
    step = results["target_step"]
    assert step < 40 and results["steps"] == step and results["curve"][-1]["step"] == step
    assert [p["accuracy"] >= 0.5 for p in results["curve"]] == [False] * (len(results["curve"]) - 1) + [True]
    assert results["time_to_target"] == results["curve"][-1]["seconds"] > 0
    assert (tmp_path / "export" / "1" / "saved_model.pb").is_file()
    assert (tmp_path / "checkpoints" / f"ckpt-{step}.index").is_file()
    again = run_python(*args, "--target", "accuracy=0.5", "--resume")
    assert_ok(again)
    assert "already finished" in again.stdout and "step " not in again.stdout.replace("at step", "")


def test_a_missed_target_says_so_in_one_line_and_keeps_the_run(tmp_path):
    missed = run_python(*SYNTHETIC, "--max-steps", "5", "--no-export", "--target", "loss=0",
                        "--results-dir", str(tmp_path))
    assert missed.returncode == contract.EXIT_TARGET_MISSED, missed.stderr[-3000:]
    ours = [line for line in missed.stderr.splitlines() if line.strip() and not TF_LOG_LINE.match(line)]
    assert len(ours) == 1 and ours[0].startswith("error: --target loss<=0 was not reached in 5 steps"), ours
    assert "Traceback" not in missed.stderr
    results = read_results(tmp_path)
    assert results["time_to_target"] is None and results["target"] == "loss<=0" and results["steps"] == 5


def test_a_target_on_an_unknown_metric_is_one_line(tmp_path):
    process = run_python(TRAIN, "--synthetic", "--target", "mean_iou=0.5", "--results-dir", str(tmp_path))
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert "--target: 'mean_iou=0.5': the metric must be one of accuracy, loss" in process.stderr
    assert not pathlib.Path(tmp_path, "results.json").exists()


def test_checkpoints_by_minutes_keep_the_newest_few(tmp_path):
    # Every 4 steps, and whenever 1e-9 minutes (60 ns) have passed since the last checkpoint: after every call
    # of one step. Of those, the newest 3 are kept; by steps alone there would be 4 and 8.
    run = run_python(*SYNTHETIC, "--max-steps", "8", "--checkpoint-every", "4", "--checkpoint-minutes", "1e-9",
                     "--steps-per-loop", "1", "--keep-checkpoints", "3", "--no-export", "--results-dir", str(tmp_path))
    assert_ok(run)
    kept = sorted(int(path.name[5:-6]) for path in (tmp_path / "checkpoints").glob("ckpt-*.index"))
    assert kept == [6, 7, 8]
    resumed = run_python(*SYNTHETIC, "--max-steps", "8", "--resume", "--no-export", "--results-dir", str(tmp_path))
    assert_ok(resumed)
    assert "already finished" in resumed.stdout
