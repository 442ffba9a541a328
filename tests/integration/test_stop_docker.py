"""`docker stop` of a training container: the init process passes SIGTERM on, the job stops with a
checkpoint and status 143, and `--resume` in a new container ends bit-identical to an uninterrupted
run in the same image (mnist-cnn, multiworker with 2 processes, dropout on). An interrupt of
`invoke run` alone stops the job the same way, and a second one kills it: no container outlives it."""
import re
import signal
import subprocess
import time

import pytest

from helpers import assert_ok, read_results, run_invoke
from jobs import Job

# In the full tier only: the longer stop cases are the night's; every push stops and resumes a job, and a
# terminal's Ctrl-C (test_stop_resume.py).
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.full]
STEPS = 60


def invoke_args(results_dir, *train_args):
    return ["run", "mnist-cnn", "--gpus", "0", "--launcher", "multiworker", "--cpu-replicas", "2",
            "--runtime", "docker", "--results-dir", str(results_dir), "--", "--synthetic", "--batch-size", "32",
            "--max-steps", str(STEPS), "--log-every", "1", *train_args]


def test_docker_stop_checkpoints_and_the_job_resumes_exactly(mnist_image, engine, tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert_ok(run_invoke(*invoke_args(whole), env=engine))

    job, name = Job(*invoke_args(parts), env=engine), None
    try:
        job.wait_for_step(10)
        name = re.search(r"--name (\S+)", "".join(job.stdout)).group(1)
        started = time.monotonic()
        stop = subprocess.run(["docker", "stop", name], capture_output=True, text=True, timeout=90)
        assert stop.returncode == 0, stop.stderr
        code = job.wait(timeout=30)
        elapsed = time.monotonic() - started
    finally:
        job.kill()
        if name:  # a killed docker client leaves its container running
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    output = job.output()
    assert code == 143, output[-5000:]
    assert elapsed < 30, elapsed  # stopped by the job itself, not by docker's SIGKILL after 60 s
    steps = {int(step) for step in re.findall(r"stopped at step (\d+) of", output)}
    assert len(steps) == 1 and len(re.findall(r"stopped at step \d+ of", output)) == 2, output[-5000:]
    step = steps.pop()
    assert (parts / "checkpoints" / f"ckpt-{step}.index").is_file()

    resumed = run_invoke(*invoke_args(parts, "--resume"), env=engine)
    assert_ok(resumed)
    assert f"at step {step}" in resumed.stdout
    assert read_results(parts)["replica_fingerprints"] == read_results(whole)["replica_fingerprints"]


def container_left(name: str) -> bool:
    listed = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^/{name}$"], capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    return bool(listed.stdout.strip())


def interrupted(results_dir, engine, interrupts: int, at_step: int, *train_args):
    """Start a docker run through invoke, send `interrupts` SIGINTs to invoke alone (not to the docker
    client: a SIGINT that does not come from a terminal), and return its status, output and container."""
    job, name = Job(*invoke_args(results_dir, *train_args), env=engine, interruptible=True), None
    try:
        job.wait_for_step(at_step)
        name = re.search(r"--name (\S+)", "".join(job.stdout)).group(1)
        for _ in range(interrupts):
            job.process.send_signal(signal.SIGINT)
            time.sleep(1)
        code = job.wait(timeout=90)
        left = container_left(name)
    finally:
        job.kill()
        if name:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
    return code, job.output(), left


def test_an_interrupt_of_invoke_alone_stops_the_job_with_a_checkpoint_and_leaves_no_container(
        mnist_image, engine, tmp_path):
    code, output, left = interrupted(tmp_path, engine, 1, 5)
    assert code == 143, output[-5000:]
    step = int(re.search(r"stopped at step (\d+) of", output).group(1))
    assert (tmp_path / "checkpoints" / f"ckpt-{step}.index").is_file()
    assert not left


def test_a_second_interrupt_kills_the_job_and_its_container(mnist_image, engine, tmp_path):
    # Each step waits 5 s (a fault invoke passes into the container), so the first interrupt's stop is
    # still under way when the second comes.
    code, output, left = interrupted(tmp_path, {**engine, "TF_RECIPES_FAULT_SLOW_STEP": "5"}, 2, 1)
    assert code not in (0, 143), output[-5000:]
    assert not left, "the killed docker client left its container running"
