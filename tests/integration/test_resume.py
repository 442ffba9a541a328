"""Checkpoints and --resume: a run stopped at step 10 and resumed to step 20 ends with the same
weights, bit for bit, as a run that went to step 20 in one go (same data order, restored optimizer
state and dropout random state). Dropout is on, as in the default model.

The runs every test starts from are made once (module fixtures): the 20-step run, a 10-step run and a
finished 6-step run. A test that resumes, damages or may touch one works on a copy of its folder
(copy_of: the files, their times included, as the run left them), so that each test still starts from a
run nobody else has touched."""
import os
import shutil
import sys

import numpy as np
import pytest

from error_checks import without_tf_log
from helpers import REPO, assert_ok, read_results, run_python
from test_mnist_launchers import load_weights

pytestmark = pytest.mark.slow
ARGS = ["recipes/mnist-cnn/train.py", "--synthetic", "--batch-size", "32", "--checkpoint-every", "5"]


def finished_run(tmp_path_factory, steps):
    folder = tmp_path_factory.mktemp(f"{steps}-steps")
    assert_ok(run_python(*ARGS, "--max-steps", str(steps), "--results-dir", str(folder)))
    return folder


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    """The uninterrupted run: 20 steps in one go."""
    return finished_run(tmp_path_factory, 20)


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory):
    """A run limited to 10 steps, checkpointed at 5 and 10: the first part of the 20-step run."""
    return finished_run(tmp_path_factory, 10)


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    """A finished run of 6 steps."""
    return finished_run(tmp_path_factory, 6)


def copy_of(run, tmp_path):
    """A copy of a run's results folder, for this test alone."""
    copy = tmp_path / "parts"
    shutil.copytree(run, copy)
    return copy


def test_resume_continues_the_same_run(whole_run, ten_steps, tmp_path):
    parts = copy_of(ten_steps, tmp_path)
    resumed = run_python(*ARGS, "--max-steps", "20", "--results-dir", str(parts), "--resume")
    assert_ok(resumed)
    assert "resumed from" in resumed.stdout and "at step 10" in resumed.stdout
    expected, got = load_weights(whole_run), load_weights(parts)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def tear(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep(len(data))])


@pytest.mark.parametrize("damage", ["torn state", "empty state", "torn state and newest checkpoint"])
def test_a_damaged_state_file_resumes_from_the_newest_listed_checkpoint_that_restores(whole_run, ten_steps, tmp_path,
                                                                                     damage):
    """checkpoints/checkpoint cut mid-line or emptied (a kill while TensorFlow rewrote it, a full disk) is not
    "no checkpoint": --resume lists the folder and continues from the newest checkpoint that restores, and ends
    where the uninterrupted run ends; without --resume the folder is still refused."""
    parts = copy_of(ten_steps, tmp_path)
    folder = parts / "checkpoints"
    tear(folder / "checkpoint", (lambda n: n // 2) if damage != "empty state" else (lambda n: 0))
    if damage == "torn state and newest checkpoint":
        (data,) = folder.glob("ckpt-10.data-*")
        tear(data, lambda n: n // 3)
    if damage == "torn state":  # one case is enough: the listing, not the state file, decides the refusal
        refused = run_python(*ARGS, "--max-steps", "20", "--results-dir", str(parts))
        assert refused.returncode == 2 and "already holds checkpoints" in refused.stderr, refused.stderr[-2000:]
    resumed = run_python(*ARGS, "--max-steps", "20", "--results-dir", str(parts), "--resume")
    assert_ok(resumed)
    step = 5 if damage == "torn state and newest checkpoint" else 10
    assert f"{folder / 'checkpoint'} cannot be read; resuming from ckpt-{step}" in resumed.stdout, resumed.stdout
    assert f"at step {step}" in resumed.stdout and "starting from step 0" not in resumed.stdout
    expected, got = load_weights(whole_run), load_weights(parts)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert sorted(path.name for path in folder.glob("ckpt-*.index")) == ["ckpt-15.index", "ckpt-20.index"]


def test_a_run_killed_while_it_exports_resumes_into_its_export(tmp_path):
    """SIGKILL as soon as the export's .partial- folder appears (results.json is written before it): --resume
    does not take the run as finished; it writes the export, and the run's results stay whole."""
    import signal
    import subprocess
    import time

    run = subprocess.Popen([sys.executable, *ARGS, "--max-steps", "5", "--results-dir", str(tmp_path)],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    export = tmp_path / "export"
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:
        if export.is_dir() and any(name.startswith(".partial-") for name in os.listdir(export)):
            run.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    assert run.wait(timeout=60) == -signal.SIGKILL, "the run ended before its export began"
    assert (tmp_path / "results.json").is_file() and not (export / "1").exists()
    resumed = run_python(*ARGS, "--max-steps", "5", "--results-dir", str(tmp_path), "--resume")
    assert_ok(resumed)
    assert "already finished" not in resumed.stdout + resumed.stderr
    assert (export / "1" / "saved_model.pb").is_file() and read_results(tmp_path)["steps"] == 5
    again = run_python(*ARGS, "--max-steps", "5", "--results-dir", str(tmp_path), "--resume")
    assert_ok(again)
    assert "already finished" in again.stdout  # now it is


def test_a_second_run_into_a_folder_in_use_is_refused_and_a_killed_run_holds_it_no_longer(tmp_path):
    """RESULTS locked (flock) by the chief while it runs: a second run into the same folder (a requeue that
    raced the first, a typo in two job scripts) refuses in one line naming the running process, and writes
    nothing; once the first is SIGKILLed, the kernel has released the lock and --resume continues."""
    import signal
    import subprocess
    import time

    first = subprocess.Popen([sys.executable, "-m", "tf_recipes.operations.faults", *ARGS, "--max-steps", "60",
                              "--results-dir", str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_RECIPES_FAULT_SLOW_STEP": "0.5"})
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "checkpoints" / "ckpt-5.index").exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first run ended or stalled"
            time.sleep(0.1)
        for extra in ([], ["--resume"]):
            second = run_python(*ARGS, "--max-steps", "10", "--results-dir", str(tmp_path), *extra)
            assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-3000:]
            assert f"{tmp_path} is in use by a run that is still going (process {first.pid} holds its lock)" \
                in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    resumed = run_python(*ARGS, "--max-steps", "60", "--results-dir", str(tmp_path), "--resume")
    assert_ok(resumed)
    assert "resumed from" in resumed.stdout


def test_existing_checkpoints_are_not_overwritten_without_resume(six_steps, tmp_path):
    run = copy_of(six_steps, tmp_path)
    before = folder_bytes(run)
    again = run_python(*ARGS, "--max-steps", "6", "--results-dir", str(run))
    assert again.returncode == 2
    assert "already holds checkpoints" in again.stderr and "--resume" in again.stderr
    assert "Traceback" not in again.stderr
    assert folder_bytes(run) == before


def folder_bytes(folder) -> dict:
    """Every file under `folder` with its bytes."""
    files = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, folder)] = handle.read()
    return files


def assert_finished_resume(process, results_dir):
    """Exit 0, one line naming the results, no training."""
    assert_ok(process)
    ours = [line for line in without_tf_log(process.stdout + "\n" + process.stderr).splitlines() if line.strip()]
    finished = [line for line in ours if "already finished" in line]
    assert len(finished) == 1 and str(results_dir / "results.json") in finished[0], ours
    assert not any(line.startswith(("step ", "results:", "resumed from")) for line in ours), ours


def test_resume_of_a_finished_run_touches_nothing(six_steps, tmp_path):
    """A recreated pod or requeued SLURM job passes --resume again after success: it must end with 0
    and leave the real results alone (it used to rewrite results.json with an empty loss curve)."""
    run = copy_of(six_steps, tmp_path)
    before = folder_bytes(run)
    again = run_python(*ARGS, "--max-steps", "6", "--results-dir", str(run), "--resume")
    assert_finished_resume(again, run)
    assert folder_bytes(run) == before


def test_resume_with_fewer_steps_than_the_checkpoint_is_refused(six_steps, tmp_path):
    run = copy_of(six_steps, tmp_path)
    before = folder_bytes(run)
    fewer = run_python(*ARGS, "--max-steps", "3", "--results-dir", str(run), "--resume")
    assert fewer.returncode == 2, fewer.stderr[-4000:]
    assert "Traceback" not in fewer.stderr
    ours = [line for line in without_tf_log(fewer.stderr).splitlines() if line.strip()]
    assert len(ours) == 1 and ours[0].startswith("error: "), ours
    assert "step 6" in ours[0] and "step 3" in ours[0] and "--max-steps 6" in ours[0], ours[0]
    assert folder_bytes(run) == before


def test_multiworker_resume_of_a_finished_run_ends_on_every_process(tmp_path):
    """Every process reads the same checkpoint and ends before any collective: none waits for a
    chief that already returned."""
    def spawn(*extra):
        return run_python("-m", "tf_recipes.operations.spawn", "--nproc", "2", "--", sys.executable, *ARGS,
                          "--launcher", "multiworker", "--max-steps", "4", "--results-dir", str(tmp_path), *extra,
                          timeout=300)

    assert_ok(spawn())
    before = folder_bytes(tmp_path)
    assert_finished_resume(spawn("--resume"), tmp_path)
    assert folder_bytes(tmp_path) == before
