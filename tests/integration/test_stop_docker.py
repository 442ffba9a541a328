"""`docker stop` of a training container: the init process passes SIGTERM on, the job stops with a
checkpoint and status 143, and `--resume` in a new container ends bit-identical to an uninterrupted
run in the same image (mnist-cnn, multiworker with 2 processes, dropout on)."""
import re
import subprocess
import time

import pytest

from helpers import assert_ok, read_results, run_invoke
from jobs import Job
from test_containers import mnist_image  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.docker, pytest.mark.slow]
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
