"""mnist-cnn under every launcher, as a user runs it: `invoke run mnist-cnn ... --runtime local`.

Each launcher must exit 0, write a complete results.json, and end with every replica's weights
bit-identical (the desync guard). The parity test then checks that the launchers train the *same*
model as a single device: same seed, same global batch, same data order.
"""
import os

import h5py
import numpy as np
import pytest

from conftest import RESULT_FIELDS, assert_ok, read_results, run_invoke

pytestmark = pytest.mark.slow
MULTI = ["mirrored", "multiworker", "horovod"]


def invoke_local(tmp_path, launcher, replicas, *train_args):
    results_dir = tmp_path / launcher
    process = run_invoke("run", "mnist-cnn", "--gpus", "0", "--launcher", launcher, "--cpu-replicas", str(replicas),
                         "--runtime", "local", "--results-dir", str(results_dir), "--", *train_args)
    return process, results_dir


@pytest.fixture(scope="module")
def acceptance_runs(tmp_path_factory, request):
    """The issue's acceptance command for each launcher (2 CPU replicas; single has 1)."""
    tmp = tmp_path_factory.mktemp("acceptance")
    runs = {}
    for launcher in ["single"] + MULTI:
        if launcher == "horovod":
            request.getfixturevalue("require_horovod")
        runs[launcher] = invoke_local(tmp, launcher, 1 if launcher == "single" else 2,
                                      "--synthetic", "--max-steps", "20")
    return runs


@pytest.mark.parametrize("launcher", ["single"] + MULTI)
def test_launcher_trains_and_writes_results(acceptance_runs, launcher):
    process, results_dir = acceptance_runs[launcher]
    assert_ok(process)
    results = read_results(results_dir)
    assert RESULT_FIELDS <= results.keys()
    replicas = 1 if launcher == "single" else 2
    assert (results["launcher"], results["replicas"], results["steps"]) == (launcher, replicas, 20)
    assert results["global_batch"] == 128 * replicas
    assert len(results["replica_fingerprints"]) == replicas
    assert len(set(results["replica_fingerprints"])) == 1, results["replica_fingerprints"]
    assert results["images_per_sec"] > 0 and results["step_time_p50_ms"] > 0
    assert results["losses"][-1]["step"] == 20
    # The synthetic digits are learnable: a model that trains at all gets far below chance loss.
    assert results["losses"][-1]["loss"] < results["losses"][0]["loss"] / 2
    assert results["final_metrics"]["test"]["examples"] == 2000
    assert os.path.exists(results_dir / "final.weights.h5")
    assert "step     20/20" in process.stdout


# -- parity -----------------------------------------------------------------------------------------
# Same seed, same global batch (64), same data order, 20 steps, dropout off (dropout masks are drawn
# per replica, so with dropout no split run can repeat a single-device run step for step).
# Both optimizers: Adam divides out the gradient's scale, so only SGD would notice an all-reduce
# that summed where it should average (or averaged over the wrong count).
#
# Tolerance: the replicas compute the same mathematics as the single device, but float32 sums run
# in a different order (two half-batch sums added, instead of one full-batch sum). That changes the
# last bits, ~1e-7 relative per step, and Adam's update direction amplifies it a little over 20
# steps. rtol 1e-3 on the losses and atol 1e-3 on the weights (which are O(0.1)) leave room for that
# rounding. A launcher that did not average the gradients (each replica stepping on its own half),
# averaged over the wrong count, or fed both replicas the same data, moves the loss by far more.
PARITY_ARGS = ["--synthetic", "--max-steps", "20", "--no-dropout", "--log-every", "1", "--warmup-steps", "0"]
LOSS_RTOL = 1e-3
WEIGHT_ATOL = 1e-3


def load_weights(results_dir):
    arrays = []
    with h5py.File(results_dir / "final.weights.h5") as handle:
        handle.visititems(lambda name, item: arrays.append((name, item[()])) if isinstance(item, h5py.Dataset) else None)
    return dict(arrays)


@pytest.fixture(scope="module", params=["sgd", "adam"])
def parity_runs(tmp_path_factory, request):
    optimizer = ["--optimizer", request.param] + (["--lr", "0.05"] if request.param == "sgd" else [])
    tmp = tmp_path_factory.mktemp(f"parity-{request.param}")
    runs = {"single": invoke_local(tmp, "single", 1, "--batch-size", "64", *PARITY_ARGS, *optimizer)}
    for launcher in MULTI:
        if launcher == "horovod":
            request.getfixturevalue("require_horovod")
        runs[launcher] = invoke_local(tmp, launcher, 2, "--batch-size", "32", *PARITY_ARGS, *optimizer)
    for process, _ in runs.values():
        assert_ok(process)
    return {launcher: results_dir for launcher, (_, results_dir) in runs.items()}


@pytest.mark.parametrize("launcher", MULTI)
def test_two_replicas_follow_the_single_device_loss_curve(parity_runs, launcher):
    single = read_results(parity_runs["single"])
    split = read_results(parity_runs[launcher])
    assert single["global_batch"] == split["global_batch"] == 64
    single_losses = [entry["loss"] for entry in single["losses"]]
    split_losses = [entry["loss"] for entry in split["losses"]]
    assert len(single_losses) == len(split_losses) == 20
    np.testing.assert_allclose(split_losses, single_losses, rtol=LOSS_RTOL)


@pytest.mark.parametrize("launcher", MULTI)
def test_two_replicas_end_with_the_single_device_weights(parity_runs, launcher):
    single = load_weights(parity_runs["single"])
    split = load_weights(parity_runs[launcher])
    assert single.keys() == split.keys() and single
    for name in single:
        np.testing.assert_allclose(split[name], single[name], atol=WEIGHT_ATOL, err_msg=name)


def test_the_parity_check_can_fail(parity_runs):
    """Guard against a parity test that cannot fail: 20 steps must move the weights far more than
    the tolerance, so a launcher that trained differently (or not at all) would be caught."""
    single = read_results(parity_runs["single"])
    losses = [entry["loss"] for entry in single["losses"]]
    assert abs(losses[-1] - losses[0]) > 100 * LOSS_RTOL * losses[0]
