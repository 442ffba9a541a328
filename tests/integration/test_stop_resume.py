"""A job stopped by a scheduler resumes into the same model, under every launcher.

SIGTERM or SIGUSR1 sent to *one non-chief* training process mid-run must stop every process of the
job after the same step, leave a checkpoint of that step, and end with status 143 (the documented
"stopped, retry with --resume"). `--resume` then finishes with fingerprints equal to those of a run
that was never stopped. The model is the default one: dropout on.

The run nobody stopped is made once per replica count: single's for single, mirrored's for the three
launchers with 2 replicas, which train the same model bit for bit, dropout included (their replicas run
the same per-replica arithmetic; tests/integration/test_precision.py holds them to one fingerprint). A
resumed multiworker or horovod job must so end where the mirrored job nobody stopped ends.
"""
import os
import re
import shutil
import signal

import pytest

from helpers import assert_ok, read_results, run_invoke
from jobs import Job, wait_for_processes, signal_rank

pytestmark = pytest.mark.slow
STEPS = 60
TRAIN = ["--synthetic", "--batch-size", "32", "--max-steps", str(STEPS), "--log-every", "1",
         "--checkpoint-every", "50"]
REPLICAS = {"single": 1, "mirrored": 2, "multiworker": 2, "horovod": 2}
PROCESSES = {"single": 1, "mirrored": 1, "multiworker": 2, "horovod": 2}
# Both stop signals under every multi-process launcher, where they differ: TensorFlow installs its own
# SIGTERM handler with MultiWorkerMirroredStrategy, and each Horovod rank installs its own. A one-process
# job (single, mirrored) has one handler for both signals, so SIGTERM alone there. SLURM's --signal
# sends SIGUSR1 to every task of a job (tests/integration/test_stop_slurm.py).
# Every push stops multiworker with SIGTERM, the signal TensorFlow takes over; the night runs every case.
FULL = pytest.mark.full
CASES = [pytest.param("single", "SIGTERM", marks=FULL), pytest.param("mirrored", "SIGTERM", marks=FULL),
         ("multiworker", "SIGTERM"), pytest.param("multiworker", "SIGUSR1", marks=FULL),
         pytest.param("horovod", "SIGTERM", marks=FULL), pytest.param("horovod", "SIGUSR1", marks=FULL)]


def invoke_args(launcher, results_dir, *train_args):
    return ["run", "mnist-cnn", "--gpus", "0", "--launcher", launcher, "--cpu-replicas", str(REPLICAS[launcher]),
            "--runtime", "local", "--results-dir", str(results_dir), "--", *TRAIN, *train_args]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Fingerprints of a run of STEPS steps that nobody stopped, per replica count (made on first use):
    single's, or mirrored's for every launcher with 2 replicas."""
    cache = {}

    def fingerprints(launcher):
        reference = "single" if REPLICAS[launcher] == 1 else "mirrored"
        if reference not in cache:
            results = tmp_path_factory.mktemp(f"whole-{reference}")
            assert_ok(run_invoke(*invoke_args(reference, results)))
            cache[reference] = read_results(results)["replica_fingerprints"]
        return cache[reference]

    return fingerprints


def rank_output(launcher, output):
    """What the training processes printed. horovodrun prefixes their lines with [RANK]<stream>:
    and, when a rank exits non-zero (143 included), adds a Python traceback of its own, which
    `invoke run` reports as status 143 (it reads the stopped.json the chief wrote)."""
    if launcher != "horovod":
        return output
    return "\n".join(line for line in output.splitlines() if re.match(r"\[\d+\]<std(out|err)>:", line))


def stop_mid_run(launcher, signame, results_dir):
    """Start the job, signal its last process (a non-chief one where there are several) after
    step 10, and return the job once it has ended."""
    job = Job(*invoke_args(launcher, results_dir))
    try:
        job.wait_for_step(10)
        processes = wait_for_processes(results_dir, PROCESSES[launcher])
        signal_rank(results_dir, max(processes), getattr(signal, signame))
        job.wait(timeout=30)  # every process must be gone within 30 s
    finally:
        job.kill()
    return job


@pytest.mark.parametrize("launcher,signame", CASES)
def test_a_stopped_job_checkpoints_together_and_resumes_exactly(launcher, signame, tmp_path, uninterrupted,
                                                                request):
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    job = stop_mid_run(launcher, signame, tmp_path)
    output = job.output()
    assert job.process.returncode == 143, output[-6000:]
    # Every process reports the same stop step, and the checkpoint of that step exists.
    stops = {int(step) for step in re.findall(r"stopped at step (\d+) of", output)}
    assert len(re.findall(r"stopped at step \d+ of", output)) == PROCESSES[launcher], output[-6000:]
    assert len(stops) == 1, output[-6000:]
    step = stops.pop()
    assert 10 <= step < STEPS
    assert (tmp_path / "checkpoints" / f"ckpt-{step}.index").is_file()
    assert not (tmp_path / "results.json").exists()
    assert "Traceback" not in rank_output(launcher, output)

    resumed = run_invoke(*invoke_args(launcher, tmp_path, "--resume"))
    assert_ok(resumed)
    assert f"at step {step}" in resumed.stdout
    assert not (tmp_path / "stopped.json").exists()
    assert read_results(tmp_path)["replica_fingerprints"] == uninterrupted(launcher)


# Every push interrupts multiworker's process group of three (invoke, spawn, the workers); the night all three.
@pytest.mark.parametrize("launcher", [pytest.param("single", marks=FULL), "multiworker",
                                      pytest.param("horovod", marks=FULL)])
def test_a_terminal_s_ctrl_c_stops_like_sigterm_and_resumes_exactly(launcher, tmp_path, uninterrupted, request):
    """Ctrl-C sends SIGINT to the whole foreground process group: invoke, tf_recipes.operations.spawn and every worker.
    The job checkpoints together and exits 143, as on SIGTERM, and --resume ends where a run nobody stopped
    ends."""
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    job = Job(*invoke_args(launcher, tmp_path), interruptible=True)
    try:
        job.wait_for_step(10)
        wait_for_processes(tmp_path, PROCESSES[launcher])
        os.killpg(job.process.pid, signal.SIGINT)
        job.wait(timeout=60)
    finally:
        job.kill()
    output = job.output()
    assert job.process.returncode == 143, output[-6000:]
    stops = set(re.findall(r"stopped at step (\d+) of", output))
    # horovodrun runs its ranks in a session of their own and passes the interrupt on to them as SIGTERM
    heard = "SIGTERM received" if launcher == "horovod" else "SIGINT received"
    assert len(stops) == 1 and heard in output, output[-6000:]
    step = int(stops.pop())
    assert (tmp_path / "checkpoints" / f"ckpt-{step}.index").is_file() and (tmp_path / "stopped.json").is_file()
    ranks = rank_output(launcher, output)  # horovodrun adds a traceback of its own on status 143
    assert "Traceback" not in ranks and "KeyboardInterrupt" not in ranks
    resumed = run_invoke(*invoke_args(launcher, tmp_path, "--resume"))
    assert_ok(resumed)
    assert f"at step {step}" in resumed.stdout
    assert read_results(tmp_path)["replica_fingerprints"] == uninterrupted(launcher)


@pytest.fixture(scope="module")
def five_steps(tmp_path_factory):
    """A finished 5-step single-device run, made once: each test below refuses to resume a copy of it."""
    results = tmp_path_factory.mktemp("five-steps")
    assert_ok(run_invoke(*invoke_args("single", results, "--max-steps", "5")))
    return results


def copy_of(run, tmp_path):
    """A copy of a run's results folder (the files and their times), for this test alone."""
    shutil.copytree(run, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_a_resume_that_cannot_be_exact_is_refused(five_steps, tmp_path):
    copy_of(five_steps, tmp_path)
    for change, named in (("--batch-size=16", "global_batch 32 -> 16"), ("--seed=7", "seed 42 -> 7")):
        refused = run_invoke(*invoke_args("single", tmp_path, "--resume", "--max-steps", "10", change))
        assert refused.returncode == 2, refused.stderr
        assert named in refused.stderr
        assert "Traceback" not in refused.stderr
        assert not (tmp_path / "results.json").exists() or read_results(tmp_path)["steps"] == 5


def test_a_corrupt_checkpoint_is_named(five_steps, tmp_path):
    copy_of(five_steps, tmp_path)
    data = next((tmp_path / "checkpoints").glob("ckpt-5.data-*"))
    data.write_bytes(data.read_bytes()[:100])
    refused = run_invoke(*invoke_args("single", tmp_path, "--resume", "--max-steps", "10"))
    assert refused.returncode == 2, refused.stderr
    error_lines = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "ckpt-5" in error_lines[0], refused.stderr
    assert "Traceback" not in refused.stderr
