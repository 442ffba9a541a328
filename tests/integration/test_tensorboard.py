"""TensorBoard: a run's chief writes scalars under RESULTS/tensorboard/{train,eval}, beside the
--profile trace, so that `tensorboard --logdir results/` shows every run. The event files must hold
exactly what the run logged: the loss and accuracy of every --log-every step (as in results.json),
the learning rate, images/s and step time, and the evaluation at the end."""
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from tf_recipes.operations.spawn import free_ports
from helpers import assert_ok, read_results, run_invoke, run_python

pytestmark = pytest.mark.slow

READ_EVENTS = """
import json, sys, glob
import tensorflow as tf
scalars = {}
for path in glob.glob(sys.argv[1] + "/*/events.out.tfevents.*"):
    run = path.split("/")[-2]
    for event in tf.compat.v1.train.summary_iterator(path):
        for value in event.summary.value:
            scalars.setdefault(f"{run}/{value.tag}", []).append([event.step, float(tf.make_ndarray(value.tensor))])
print(json.dumps(scalars))
"""


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """A 12-step run logged every 4 steps under LAUNCHER, in RESULTS/a-run, made on first use: the
    results folder that `tensorboard --logdir RESULTS` serves."""
    made = {}

    def run(launcher):
        if launcher not in made:
            folder = tmp_path_factory.mktemp(launcher) / "results" / "a-run"
            replicas = "1" if launcher == "single" else "2"
            assert_ok(run_invoke("run", "mnist-cnn", "--gpus", "0", "--launcher", launcher, "--cpu-replicas",
                                 replicas, "--runtime", "local", "--results-dir", str(folder), "--", "--synthetic",
                                 "--max-steps", "12", "--log-every", "4", "--scale-lr", "--lr-warmup-steps", "8",
                                 "--lr-schedule", "constant"))
            made[launcher] = folder
        return made[launcher]

    return run


@pytest.mark.parametrize("launcher", ["single", pytest.param("multiworker", marks=pytest.mark.full)])
def test_event_files_hold_the_logged_values(logged_run, launcher):
    tmp_path = logged_run(launcher)
    reader = run_python("-c", READ_EVENTS, str(tmp_path / "tensorboard"))
    assert_ok(reader)
    scalars = json.loads(reader.stdout.strip().splitlines()[-1])
    results = read_results(tmp_path)

    logged = {entry["step"]: entry for entry in results["losses"]}
    assert [step for step, _ in scalars["train/loss"]] == sorted(logged) == [4, 8, 12]
    for name in ("loss", "accuracy"):
        for step, value in scalars[f"train/{name}"]:
            assert value == pytest.approx(logged[step][name], rel=1e-6), (name, step)
    for name in ("learning_rate", "images_per_sec", "step_time_ms"):
        assert [step for step, _ in scalars[f"train/{name}"]] == [4, 8, 12], name
        assert all(value > 0 for _, value in scalars[f"train/{name}"]), name
    if launcher == "multiworker":  # --scale-lr with 2 replicas: the rate ramps from 1x to 2x over 8 steps
        rates = [value for _, value in scalars["train/learning_rate"]]
        assert rates[0] < rates[1] == pytest.approx(rates[2])
    test = results["final_metrics"]["test"]
    assert scalars["eval/loss"] == [[12, pytest.approx(test["loss"], rel=1e-6)]]
    assert scalars["eval/accuracy"] == [[12, pytest.approx(test["accuracy"], rel=1e-6)]]


def test_tensorboard_lists_the_scalars_of_a_run(logged_run):
    """`tensorboard --logdir results/`, as the README shows, serves the run's scalars."""
    results = logged_run("single").parent
    port = free_ports(1)[0]
    server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir",
                               str(results), "--port", str(port), "--host", "localhost"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, tags = time.monotonic() + 120, {}
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/data/plugin/scalars/tags", timeout=5) as reply:
                    tags = json.load(reply)
                if "a-run/tensorboard/train" in tags:
                    break
            except OSError:
                pass
            time.sleep(1)
    finally:
        server.terminate()
        server.wait(timeout=30)
    train_tags = {"loss", "accuracy", "learning_rate", "images_per_sec", "step_time_ms"}
    assert train_tags <= set(tags["a-run/tensorboard/train"])
    assert {"loss", "accuracy"} <= set(tags["a-run/tensorboard/eval"])
