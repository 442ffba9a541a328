"""mnist-cnn under every launcher, as a user runs it: `invoke run mnist-cnn ... --runtime local`.

Each launcher must exit 0, write a complete results.json, and end with every replica's weights
bit-identical (the desync guard). The parity test then checks that the launchers train the *same*
model as a single device: same seed, same global batch, same data order.

The acceptance runs are the command as a user types it, export included (the chief's is checked under
the two-process launchers). The other runs only compare losses and weights, so they pass --no-export.
"""
import json
import os
import re

import h5py
import numpy as np
import pytest

from helpers import RESULT_FIELDS, assert_ok, read_results, run_invoke, run_python, stack_launchers

pytestmark = pytest.mark.slow
MULTI = stack_launchers("mirrored", "multiworker", "horovod")  # the installed stack's
# TensorFlow's C++ log lines at ERROR level: "2026-... : E path/file.cc:N] ..." or "E0000 ... file.cc:N] ...",
# which horovodrun prefixes with [RANK]<stderr>:
ERROR_LINE = re.compile(r"^(?:\[\d+\]<stderr>:)?(?:\d{4}-\d\d-\d\d [\d:.]+: E |E\d{4} )")
CLUSTER_WORDS = re.compile(r"coordination|collective|ring_alg|heartbeat|PREEMPTION|grpc|RecvBuf|gloo|horovod", re.I)


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
    # Every collective runs inside a tf.function: TF 2.21 warns of each strategy call run eagerly.
    assert "eagerly has significant overhead" not in process.stdout + process.stderr


@pytest.mark.full  # the night's: one more run per launcher; every push trains with --steps-per-loop 10
@pytest.mark.parametrize("launcher", ["single"] + MULTI)
def test_several_steps_per_call_train_the_same_model_as_one(acceptance_runs, launcher, tmp_path):
    """The acceptance runs use the default --steps-per-loop 10; one step per call must end with
    bit-identical weights (the same steps, only fewer host round-trips)."""
    _, default = acceptance_runs[launcher]
    process, one = invoke_local(tmp_path, launcher, 1 if launcher == "single" else 2,
                                "--synthetic", "--max-steps", "20", "--steps-per-loop", "1", "--no-export")
    assert_ok(process)
    assert read_results(one)["replica_fingerprints"] == read_results(default)["replica_fingerprints"]
    assert [e["loss"] for e in read_results(one)["losses"]] == [e["loss"] for e in read_results(default)["losses"]]


# -- parity -----------------------------------------------------------------------------------------
# Same seed, same global batch (64), same data order, 20 steps, dropout off (dropout masks are drawn
# per replica, so with dropout no split run can repeat a single-device run step for step).
# Two optimizers: Adam divides out the gradient's scale, so only SGD notices an all-reduce that
# summed where it should average; Adam's per-variable slots are what the recipes train with.
#
# Tolerance: the replicas compute the same mathematics as the single device, but float32 sums run
# in a different order (two half-batch sums added, instead of one full-batch sum). That changes the
# last bits, ~1e-7 relative per step, and training amplifies it a little over 20 steps. rtol 1e-3
# on the losses and atol 1e-3 on the weights (which are O(0.1)) leave room for that rounding.
# The negative controls below prove that this tolerance catches real mistakes: a replica that
# stepped on its own half batch only, and (SGD) gradients summed instead of averaged (= 2x the rate).
# --log-every 5 with the default --steps-per-loop 10: each compiled call runs 5 steps.
# A constant rate (not the recipe's warm-up): the negative controls need a rate that moves the weights
# from the first step. No export: these runs are compared by their losses and final.weights.h5.
PARITY_ARGS = ["--synthetic", "--max-steps", "20", "--no-dropout", "--log-every", "5", "--warmup-steps", "0",
               "--lr-schedule", "constant", "--no-export"]
OPTIMIZERS = {"sgd": ["--optimizer", "sgd", "--lr", "0.01"], "adam": ["--optimizer", "adam", "--lr", "0.001"]}
LOSS_RTOL = 1e-3
WEIGHT_ATOL = 1e-3


def load_weights(results_dir):
    arrays = []
    with h5py.File(results_dir / "final.weights.h5") as handle:
        handle.visititems(
            lambda name, item: arrays.append((name, item[()])) if isinstance(item, h5py.Dataset) else None)
    return dict(arrays)


def losses(results_dir):
    return np.array([entry["loss"] for entry in read_results(results_dir)["losses"]])


def within_parity(run, reference) -> bool:
    weights, expected = load_weights(run), load_weights(reference)
    return (np.allclose(losses(run), losses(reference), rtol=LOSS_RTOL, atol=0)
            and all(np.allclose(weights[k], expected[k], rtol=0, atol=WEIGHT_ATOL) for k in expected))


# Every push runs SGD's, which has both negative controls; the night runs Adam's too.
@pytest.fixture(scope="module", params=[pytest.param("adam", marks=pytest.mark.full), "sgd"])
def parity_runs(tmp_path_factory, request):
    optimizer = OPTIMIZERS[request.param]
    tmp = tmp_path_factory.mktemp(f"parity-{request.param}")
    runs = {"single": invoke_local(tmp, "single", 1, "--batch-size", "64", *PARITY_ARGS, *optimizer),
            # Negative control: what one replica would train on if the all-reduce did nothing.
            "own-half-only": invoke_local(tmp / "control", "single", 1, "--batch-size", "32", *PARITY_ARGS, *optimizer)}
    if request.param == "sgd":  # negative control: gradients summed over 2 replicas, not averaged
        rate = str(2 * float(optimizer[-1]))
        runs["summed"] = invoke_local(tmp / "summed", "single", 1, "--batch-size", "64", *PARITY_ARGS, *optimizer,
                                      "--lr", rate)
    for launcher in MULTI:
        if launcher == "horovod":
            request.getfixturevalue("require_horovod")
        runs[launcher] = invoke_local(tmp, launcher, 2, "--batch-size", "32", *PARITY_ARGS, *optimizer)
    for process, _ in runs.values():
        assert_ok(process)
    return {launcher: results_dir for launcher, (_, results_dir) in runs.items()}


@pytest.mark.parametrize("launcher", MULTI)
def test_two_replicas_follow_the_single_device_loss_curve(parity_runs, launcher):
    single, split = parity_runs["single"], parity_runs[launcher]
    assert read_results(single)["global_batch"] == read_results(split)["global_batch"] == 64
    assert len(losses(single)) == len(losses(split)) == 4  # steps 5, 10, 15, 20
    np.testing.assert_allclose(losses(split), losses(single), rtol=LOSS_RTOL)


@pytest.mark.parametrize("launcher", MULTI)
def test_two_replicas_end_with_the_single_device_weights(parity_runs, launcher):
    single = load_weights(parity_runs["single"])
    split = load_weights(parity_runs[launcher])
    assert single.keys() == split.keys() and single
    for name in single:
        np.testing.assert_allclose(split[name], single[name], rtol=0, atol=WEIGHT_ATOL, err_msg=name)


def test_the_tolerance_catches_a_launcher_that_trains_a_different_model(parity_runs):
    for control in ("own-half-only", "summed"):
        if control in parity_runs:
            assert not within_parity(parity_runs[control], parity_runs["single"]), control


@pytest.mark.parametrize("launcher", stack_launchers("multiworker", "horovod"))
def test_the_chief_exports_a_savedmodel_that_serves_the_trained_model(acceptance_runs, launcher, tmp_path):
    from export_checks import check_export

    process, results_dir = acceptance_runs[launcher]
    assert_ok(process)
    assert process.stdout.count("export: ") == 1  # the chief only, once per job
    check_export(results_dir, tmp_path, recipe="mnist-cnn", build_args=(), size=(28, 28), channels=1,
                 classes=[str(d) for d in range(10)])


# -- a clean end, and one evaluation of every example ----------------------------------------------------
# The two-process jobs share the evaluation: each process evaluates its part of the test set and the
# sums are all-reduced. It must count every example once, and give what one process gives over the whole
# test set from the same final weights; and a job that went well prints no ERROR line from TensorFlow's
# coordination service or collectives (tests/integration/test_cluster_failures.py: the jobs that go wrong).

EVALUATE_ALONE = """
import json, sys
sys.path[:0] = [".", "tests"]
import keras
from tf_recipes import training
from tf_recipes.config import RunConfig
from tf_recipes.launchers import create_launcher
from helpers import recipe_module
train = recipe_module("mnist-cnn", "train")
data = recipe_module("mnist-cnn", "data")
launcher = create_launcher("single")
x_train, _, x_test, y_test = data.synthetic_mnist(42)
model = train.build_model()
model.load_weights(sys.argv[1])
config = RunConfig(batch_size=32, results_dir=sys.argv[2])
trainer = training.Trainer(launcher, "mnist-cnn", config, config.plan(len(x_train), 1), model=model,
                           optimizer=keras.optimizers.Adam(), task=train.TASK)
print(json.dumps(trainer.evaluate(data.make_eval_dataset(x_test, y_test))))
"""


@pytest.mark.parametrize("launcher", stack_launchers("multiworker", "horovod"))
def test_a_two_process_job_ends_clean_and_evaluates_every_example_once(acceptance_runs, launcher, tmp_path):
    process, results_dir = acceptance_runs[launcher]
    assert_ok(process)
    noisy = [line for line in process.stderr.splitlines() if ERROR_LINE.match(line) and CLUSTER_WORDS.search(line)]
    assert not noisy, "\n".join(noisy)
    shared = read_results(results_dir)["final_metrics"]["test"]
    evaluated = run_python("-c", EVALUATE_ALONE, str(results_dir / "final.weights.h5"), str(tmp_path / "alone"))
    assert_ok(evaluated)
    alone = json.loads(evaluated.stdout.strip().splitlines()[-1])
    assert shared["examples"] == alone["examples"] == 2000
    assert shared["accuracy"] == alone["accuracy"]
    assert shared["loss"] == pytest.approx(alone["loss"], rel=1e-6)
