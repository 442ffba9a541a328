"""The pure parts of the training loop and its neighbours, with real values: where a compiled call ends
(tf_recipes.training.loop_end), the training iterator released off the main thread, the learning-rate
warm-up, the evaluation sums, the weights' fingerprint, the SLURM variables' check, a resume's identity check
(tf_recipes.checkpoints), the progress line and results.json (tf_recipes.reporting). No model is trained
here."""
import errno
import os
import time
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from helpers import run_python
from tf_recipes import checkpoints, contract, evaluation, launchers, reporting, training
from tf_recipes.config import RunConfig, Target

# -- where a compiled call ends ----------------------------------------------------------------------


def call_ends(total, per_loop, every=(), boundaries=()):
    """The last step of every compiled call of a run of `total` steps."""
    ends, step = [], 0
    while step < total:
        step = training.loop_end(step, total, per_loop, every, boundaries)
        ends.append(step)
    return ends


def test_a_call_runs_steps_per_loop_steps_and_stops_at_the_last_step():
    assert call_ends(25, 10) == [10, 20, 25]
    assert call_ends(3, 1) == [1, 2, 3]
    assert training.loop_end(95, 98, 10) == 98


def test_a_call_ends_at_every_step_whose_outputs_the_host_needs():
    # --log-every 4 and a checkpoint every 6 steps: the host reads steps 4, 6, 8, 12, ...
    assert call_ends(14, 10, every=(4, 6)) == [4, 6, 8, 12, 14]
    assert training.loop_end(7, 100, 10, every=(4, 6)) == 8  # a call that starts between two of them


def test_a_call_ends_at_the_profile_window_boundaries_still_ahead():
    assert call_ends(20, 10, every=(20,), boundaries=(3, 6)) == [3, 6, 16, 20]
    assert training.loop_end(6, 20, 10, boundaries=(3, 6)) == 16  # both behind: no longer a limit


# -- learning rate --------------------------------------------------------------------------------------

def test_the_warmup_ramps_linearly_from_the_base_rate_to_scale_times_it_then_stays():
    schedule = training.WarmupSchedule(0.1, 4.0, 10)
    rates = [float(schedule(step)) for step in (0, 5, 10, 20)]
    assert rates == pytest.approx([0.1, 0.25, 0.4, 0.4])
    assert schedule.get_config() == {"base_rate": 0.1, "scale": 4.0, "warmup_steps": 10}
    no_warmup = training.WarmupSchedule(0.1, 4.0, 0)
    assert [float(no_warmup(step)) for step in (0, 1)] == pytest.approx([0.1, 0.4])


def test_the_rate_is_scaled_only_when_asked_and_there_are_several_replicas():
    def rate(replicas, scale_lr):
        config = RunConfig(lr=0.01, scale_lr=scale_lr, lr_warmup_steps=100)
        return training.learning_rate(config, config.plan(1000, replicas))

    assert rate(4, False) == 0.01
    assert rate(1, True) == 0.01
    scaled = rate(4, True)
    assert isinstance(scaled, training.WarmupSchedule)
    assert (scaled.base_rate, scaled.scale, scaled.warmup_steps) == (0.01, 4.0, 100)


def test_the_poly_rate_falls_from_the_rate_to_its_end_as_mmsegmentation_s_policy():
    config = RunConfig(lr=0.01, lr_schedule="poly", lr_end=1e-4, lr_warmup_steps=0, batch_size=2)
    plan = config.plan(16_000, 8)  # 1,000 steps an epoch: the schedule spans them
    schedule = training.learning_rate(config, plan)
    assert isinstance(schedule, training.WarmupPolySchedule)
    # mmsegmentation's poly: (base - min) * (1 - iter / max_iters) ** 0.9 + min, iter counted from 0
    expected = [(0.01 - 1e-4) * (1 - t / 1000) ** 0.9 + 1e-4 for t in (0, 250, 999, 1000)]
    assert [float(schedule(t)) for t in (0, 250, 999, 1000)] == pytest.approx(expected, rel=1e-5)
    warm = training.WarmupPolySchedule(0.01, 0.0, 10, 1000)
    assert float(warm(4)) == pytest.approx(0.01 * (1 - 4 / 1000) ** 0.9 * 0.5, rel=1e-5)


# -- evaluation sums ------------------------------------------------------------------------------------

def test_the_training_iterator_is_released_off_the_main_thread_and_nothing_else_holds_it():
    import threading

    released = threading.Event()

    class Inputs:  # stands for the distributed iterator, whose deletion blocks the thread that deletes it
        def __del__(self):
            released.name = threading.current_thread().name
            released.set()

    holder = [Inputs()]
    training.release_in_background(holder)
    assert released.wait(10) and released.name == "release-train-iterator"
    assert holder == []


LEAVING = """
import sys, time
from tf_recipes import cli, config, training
class SlowToRelease:
    def __del__(self):
        time.sleep(float(sys.argv[1]))
training.release_in_background([SlowToRelease()])
def main():
    print("written", flush=True)
    if sys.argv[2] == "missed":
        raise config.TargetMissed("--target accuracy>=0.99 was not reached")
cli.run_main(main)
"""


@pytest.mark.parametrize("release_seconds, outcome, status", [(0.1, "done", 0), (60, "done", 0), (60, "missed", 13)])
def test_a_run_leaves_with_its_status_without_waiting_long_for_the_iterators_release(release_seconds, outcome,
                                                                                      status):
    started = time.monotonic()
    process = run_python("-c", LEAVING, str(release_seconds), outcome, timeout=60)
    assert process.returncode == status and process.stdout == "written\n", process.stderr
    assert ("error: --target" in process.stderr) == (outcome == "missed")
    assert time.monotonic() - started < 30  # the release left behind (tf_recipes.stopping), not waited for


def test_evaluation_sums_travel_in_one_collective_and_keep_their_shapes():
    calls = []

    def sum_over_processes(values):  # as if three processes had the same sums
        calls.append(values.copy())
        return values * 3

    totals = {"loss": np.float64(2.0), "intersection": np.array([1.0, 2.0]), "examples": np.float64(4.0)}
    summed = training.summed_over_processes(SimpleNamespace(sum_over_processes=sum_over_processes), totals)
    assert len(calls) == 1 and calls[0].tolist() == [4.0, 1.0, 2.0, 2.0]  # sorted by name
    assert float(summed["loss"]) == 6.0 and float(summed["examples"]) == 12.0
    assert summed["intersection"].tolist() == [3.0, 6.0] and np.shape(summed["loss"]) == ()


# -- the weights' fingerprint ---------------------------------------------------------------------------

WEIGHTS = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], np.int64)]


def test_the_fingerprint_of_given_weights_stays_what_results_json_recorded():
    assert launchers.weights_fingerprint(WEIGHTS) == "f0f5bba1f02f95c9"


def test_the_fingerprint_changes_with_one_bit_the_shape_or_the_dtype():
    nudged = [WEIGHTS[0].copy(), WEIGHTS[1]]
    nudged[0][1, 2] = np.nextafter(nudged[0][1, 2], np.float32(10))
    reshaped = [WEIGHTS[0].reshape(3, 2), WEIGHTS[1]]
    retyped = [WEIGHTS[0].view(np.int32), WEIGHTS[1]]  # the same bytes
    fingerprints = {launchers.weights_fingerprint(w) for w in (WEIGHTS, nudged, reshaped, retyped)}
    assert len(fingerprints) == 4
    assert launchers.weights_fingerprint([w.copy() for w in WEIGHTS]) == "f0f5bba1f02f95c9"


# -- the SLURM variables --------------------------------------------------------------------------------

SLURM = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "node[1-2]",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize("tasks", ["4", "2(x2)", "2(x1),1,1", "1,3"])
def test_a_complete_slurm_step_passes(tasks):
    launchers.check_slurm_environment({**SLURM, "SLURM_STEP_TASKS_PER_NODE": tasks})


@pytest.mark.parametrize("name, value, message", [
    ("SLURM_PROCID", "", "SLURM_PROCID='' is not a whole number >= 0"),
    ("SLURM_PROCID", "-1", "SLURM_PROCID='-1' is not a whole number >= 0"),
    ("SLURM_STEP_NUM_TASKS", "0", "SLURM_STEP_NUM_TASKS='0' is not a whole number >= 1"),
    ("SLURM_PROCID", "4", "SLURM_PROCID=4 is not below SLURM_STEP_NUM_TASKS=4"),
    ("SLURM_STEP_NODELIST", " ", "SLURM_STEP_NODELIST=' ' is empty"),
    ("SLURM_STEP_TASKS_PER_NODE", "2(x2", "SLURM_STEP_TASKS_PER_NODE='2(x2' is not like 2 or 2(x3),1"),
    ("SLURM_STEP_TASKS_PER_NODE", "2,,1", "is not like 2 or 2(x3),1"),
])
def test_a_wrong_slurm_variable_is_named_with_its_value(name, value, message):
    with pytest.raises(launchers.LauncherError) as error:
        launchers.check_slurm_environment({**SLURM, name: value})
    assert message in str(error.value)


# -- launchers are told apart by their traits -----------------------------------------------------------

@pytest.mark.parametrize("kind", [launchers.SingleLauncher, launchers.MirroredLauncher,
                                  launchers.MultiWorkerLauncher, launchers.HorovodLauncher])
def test_every_launcher_answers_with_its_traits_from_the_contract(kind):
    launcher = object.__new__(kind)  # no devices, no cluster: only the class's answers
    assert launcher.traits == contract.LAUNCHER_TRAITS[kind.name]


# -- a resume's identity --------------------------------------------------------------------------------

IDENTITY = {"recipe": "mnist-cnn", "global_batch": 256, "replicas": 2, "per_replica_batch": 128, "seed": 42,
            "training_examples": 60000, "precision": "float32"}


def test_the_same_run_resumes_also_from_a_run_json_without_a_precision():
    assert checkpoints.identity_mismatch(dict(IDENTITY), IDENTITY, "ckpt-6") is None
    older = {key: value for key, value in IDENTITY.items() if key != "precision"}
    assert checkpoints.identity_mismatch(older, {**IDENTITY, "precision": "mixed_float16"}, "ckpt-6") is None


def test_other_replicas_or_batch_are_named_with_what_to_resume_with():
    message = checkpoints.identity_mismatch({**IDENTITY, "global_batch": 128, "replicas": 1}, IDENTITY, "ckpt-6")
    assert message.startswith("--resume: ckpt-6 was written by a run with other settings "
                              "(global_batch 128 -> 256; replicas 1 -> 2); the data order")
    assert "Resume with the same --batch-size, replica count, --seed and data, or start over" in message
    assert "precision" not in message


def test_another_precision_is_named_with_its_flag():
    message = checkpoints.identity_mismatch({**IDENTITY, "precision": "mixed_float16"}, IDENTITY, "ckpt-6")
    assert "(precision mixed_float16 -> float32)" in message
    assert "Resume with its precision (--amp float16; a bare --amp is float16 only on a GPU)" in message
    assert "data order" not in message


def test_only_a_whole_results_json_of_the_last_step_counts_as_finished(tmp_path):
    import json

    path = tmp_path / "results.json"
    assert not checkpoints.results_complete(str(path), 10)  # none
    path.write_text(json.dumps({field: 1 for field in contract.RESULT_FIELDS} | {"steps": 10}))
    assert checkpoints.results_complete(str(path), 10)
    assert not checkpoints.results_complete(str(path), 12)  # another run's last step
    path.write_text(json.dumps({"steps": 10}))
    assert not checkpoints.results_complete(str(path), 10)  # fields missing
    path.write_text('{"steps": 10, "recipe"')
    assert not checkpoints.results_complete(str(path), 10)  # cut short


# -- progress and results.json --------------------------------------------------------------------------

def test_the_progress_line_shows_epoch_float_metrics_loss_scale_and_rate():
    line = reporting.progress_line(40, 100, 39, 0.123456, {"accuracy": 0.5, "loss_scale": 32768.0, "examples": 256},
                                   1234.4)
    assert line == "step     40/100  epoch 2  loss 0.1235  accuracy 0.5000  loss scale 32768  1,234 img/s"
    assert reporting.progress_line(39, 100, 39, 2.0, {}, 12.345).endswith("epoch 1  loss 2.0000    12.3 img/s")


def test_a_full_disk_or_quota_is_told_apart_from_other_errors():
    assert reporting.disk_full_reason(OSError(errno.ENOSPC, "x")) == os.strerror(errno.ENOSPC)
    assert reporting.disk_full_reason(OSError(errno.ENOENT, "x")) is None
    assert reporting.disk_full_reason(RuntimeError(f"h5py: {os.strerror(errno.EDQUOT)}")) == os.strerror(errno.EDQUOT)
    assert reporting.disk_full_reason(RuntimeError("something else")) is None


def test_bytes_of_variables_count_every_element_at_its_size():
    assert reporting.nbytes([np.zeros((2, 3), np.float32), np.zeros(4, np.float16)]) == 32
    assert reporting.nbytes([tf.Variable(tf.zeros([5], tf.float64))]) == 40


def summary_of(curve: evaluation.Curve, **changes) -> reporting.RunSummary:
    fields = dict(recipe="mnist-cnn", launcher="mirrored", nodes=1, workers=1, replicas=2, per_replica_batch=4,
                  global_batch=8, start_step=0, steps=4, steps_per_epoch=2, warmup_steps=1,
                  step_times=[1.0, 0.5, 0.5, 0.25], losses=[{"step": 4, "loss": 0.5}],
                  replica_fingerprints=["ab", "ab"],
                  precision="float32", loss_scaling=None, xla=False, eval_every=2, curve=curve.points,
                  target="accuracy>=0.5", time_to_target=None, target_step=None, wall_seconds=curve.seconds())
    return reporting.RunSummary(**{**fields, **changes})


def test_results_json_holds_every_contract_field_and_the_recipe_s_extra(monkeypatch):
    monkeypatch.setattr(reporting, "versions", lambda: {"tensorflow": "2.17.1"})
    curve = evaluation.Curve("unused", 8)
    curve.add(2, {"loss": 0.7, "accuracy": 0.25, "examples": 10})
    curve.add(4, {"loss": 0.6, "accuracy": 0.5, "examples": 10})
    reached = Target("accuracy", 0.5).first_reached(curve.points)
    summary = summary_of(curve, time_to_target=reached["seconds"], target_step=reached["step"])
    record = reporting.results_record(summary, {"final_metrics": {"test": {}}, "precision": "mixed_bfloat16"},
                                      command=["train.py"])
    assert [(p["step"], p["examples_seen"], p["accuracy"]) for p in record["curve"]] == [(2, 16, 0.25), (4, 32, 0.5)]
    assert (record["eval_every"], record["target"], record["target_step"]) == (2, "accuracy>=0.5", 4)
    assert record["time_to_target"] == record["curve"][1]["seconds"]
    assert contract.RESULT_FIELDS <= record.keys() and "step_times" not in record
    assert (record["launcher"], record["replicas"], record["steps"], record["losses"]) == (
        "mirrored", 2, 4, [{"step": 4, "loss": 0.5}])
    assert (record["timed_steps"], record["images_per_sec"], record["images_per_sec_per_replica"]) == (3, 19.2, 9.6)
    assert record["replicas_in_sync"] and record["precision"] == "mixed_bfloat16"  # the recipe's word wins
    assert record["command"] == ["train.py"] and record["versions"] == {"tensorflow": "2.17.1"}
    assert not reporting.results_record(summary_of(curve, replica_fingerprints=["ab", "cd"]),
                                        command=[])["replicas_in_sync"]


@pytest.fixture
def signal_handlers():
    """The process's SIGTERM, SIGUSR1 and SIGINT handlers, put back after a Trainer installed its own."""
    import signal

    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def test_a_trainer_made_in_one_step_evaluates_and_finishes_without_fit(tmp_path, signal_handlers):
    import json

    import keras

    launcher = launchers.create_launcher("single")
    config = RunConfig(batch_size=4, results_dir=str(tmp_path / "run"), export=False, flags={"batch_size": 4})
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    trainer = training.Trainer(launcher, "mnist-cnn", config, config.plan(8, 1), model=model,
                               optimizer=keras.optimizers.SGD(0.1), task=training.classification_task())
    held_out = tf.data.Dataset.from_tensor_slices((np.ones((6, 3), np.float32), np.zeros(6, np.int64))).batch(4)
    with pytest.raises(contract.UserError, match="give evaluate"):
        trainer.evaluate()  # no held-out set of fit's: the error says what to give
    metrics = trainer.evaluate(held_out)
    assert metrics["examples"] == 6 and trainer.summary().steps == 2 and trainer.summary().curve[0]["step"] == 0
    trainer.finish({"final_metrics": {"test": metrics}, "classes": ["a", "b"]})
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (results["start_step"], results["steps"], results["replicas_in_sync"]) == (0, 2, True)
    assert results["final_metrics"]["test"]["accuracy"] == metrics["accuracy"] and results["timed_steps"] == 0
    assert "batch_size: 4" in (tmp_path / "run" / "config.yaml").read_text()
