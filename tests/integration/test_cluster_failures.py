"""Never hang, and leave cleanly.

- A multiworker cluster that never forms ends within --join-timeout (+10 s) with status 4 and one
  line naming the worker that never joined.
- A peer killed (SIGKILL) or frozen (SIGSTOP) mid-run makes every other process exit non-zero
  within 60 s, with one line saying so.

That a successful 2-process run prints no ERROR line from the cluster and evaluates every example once
is checked on the acceptance runs of tests/integration/test_mnist_launchers.py.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tf_recipes.operations.spawn import free_ports, worker_environments
from helpers import REPO, run_python
from jobs import Job, wait_for_processes

pytestmark = pytest.mark.slow
TRAIN = ["recipes/mnist-cnn/train.py", "--launcher", "multiworker", "--synthetic", "--batch-size", "32",
         "--log-every", "1"]
# TensorFlow's C++ log lines at ERROR level: "2026-... : E path/file.cc:N] ..." or "E0000 ... file.cc:N] ...".


def start_workers(count, results_dir, *train_args, started=None):
    """`count` multiworker processes with their own TF_CONFIG (only those in `started`, if given),
    without tf_recipes.operations.spawn, which would stop the others itself when one fails."""
    environments = worker_environments(count, free_ports(count))
    processes = {}
    for index, env in enumerate(environments):
        if started is None or index in started:
            processes[index] = subprocess.Popen(
                [sys.executable, *TRAIN, "--results-dir", str(results_dir), *train_args], cwd=REPO, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**os.environ, **env, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "1"})
    return processes, environments


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_cluster_that_never_forms_names_the_missing_worker(tmp_path):
    processes, environments = start_workers(2, tmp_path, "--max-steps", "5", "--join-timeout", "10", started={0})
    started = time.monotonic()
    out, err = processes[0].communicate(timeout=120)
    elapsed = time.monotonic() - started
    missing = json.loads(environments[1]["TF_CONFIG"])["cluster"]["worker"][1]
    assert processes[0].returncode == 4, err[-3000:]
    assert elapsed < 10 + 10 + 15, elapsed  # the deadline, +10 s, + TensorFlow's start-up
    lines = error_lines(err)
    assert len(lines) == 1 and f"worker 1 ({missing}) never joined" in lines[0], err[-3000:]
    assert "Traceback" not in err


def test_a_task_index_outside_the_cluster_is_one_line(tmp_path):
    """TF_CONFIG as a user may write it by hand, with a worker index the cluster does not have."""
    config = json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 5}})
    process = run_python(*TRAIN, "--max-steps", "2", "--results-dir", str(tmp_path), timeout=300,
                         env={"TF_CONFIG": config, "PYTHONPATH": str(REPO)})
    assert process.returncode == 2, process.stderr[-3000:]
    assert error_lines(process.stderr) == ["error: TF_CONFIG task index 5 is outside its cluster's 2 worker "
                                           "address(es) (0..1); give each process its own index"]
    assert "Traceback" not in process.stderr and not (tmp_path / "results.json").exists()


@pytest.mark.parametrize("signame", ["SIGKILL", "SIGSTOP"])
def test_a_lost_multiworker_peer_ends_the_others(signame, tmp_path):
    processes, _ = start_workers(2, tmp_path, "--max-steps", "100000")
    try:
        for line in processes[0].stdout:  # the chief's progress
            if re.search(r"step\s+10/", line):
                break
        os.kill(processes[1].pid, getattr(signal, signame))
        started = time.monotonic()
        _, err = processes[0].communicate(timeout=90)
        elapsed = time.monotonic() - started
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
    assert processes[0].returncode == 4, err[-3000:]
    assert elapsed < 60, elapsed
    lines = error_lines(err)
    assert len(lines) == 1 and "lost contact with the other workers" in lines[0], err[-3000:]
    assert "Traceback" not in err


def test_a_killed_multiworker_worker_ends_the_job_with_the_documented_status_and_leaves_no_stray_files(tmp_path):
    """`invoke run --launcher multiworker` with a checkpoint every step: the non-chief worker's throwaway
    checkpoints never touch the disk (watched in its TMPDIR while the job runs), and SIGKILL to it ends the
    job with status 4 (a peer lost: retry with --resume), not the killed worker's own."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    job = Job("run", "mnist-cnn", "--gpus", "0", "--launcher", "multiworker", "--cpu-replicas", "2", "--runtime",
              "local", "--results-dir", str(tmp_path / "run"), "--", "--synthetic", "--batch-size", "32",
              "--max-steps", "100000", "--log-every", "1", "--checkpoint-every", "1", env={"TMPDIR": str(scratch)})
    seen = set()
    try:
        job.wait_for_step(3)
        workers = wait_for_processes(tmp_path / "run", 2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # about as many saves as seconds x steps per second
            seen |= {path.name for path in scratch.rglob("*") if "ckpt" in path.name}
            time.sleep(0.01)
        os.kill(workers[1], signal.SIGKILL)
        code = job.wait(timeout=90)
    finally:
        job.kill()
    assert code == 4, job.output()[-4000:]
    assert not seen and not [path for path in scratch.rglob("*") if "ckpt" in path.name], seen


@pytest.mark.parametrize("signame", ["SIGKILL", "SIGSTOP"])
def test_a_lost_horovod_rank_ends_the_job(signame, tmp_path, require_horovod):
    job = Job("run", "mnist-cnn", "--gpus", "0", "--launcher", "horovod", "--cpu-replicas", "2", "--runtime",
              "local", "--results-dir", str(tmp_path), "--", "--synthetic", "--batch-size", "32",
              "--max-steps", "100000", "--log-every", "1")
    try:
        job.wait_for_step(10)
        ranks = wait_for_processes(tmp_path, 2)
        os.kill(ranks[1], getattr(signal, signame))
        started = time.monotonic()
        while os.path.exists(f"/proc/{ranks[0]}") and time.monotonic() - started < 90:
            with open(f"/proc/{ranks[0]}/stat") as handle:
                if handle.read().split()[2] == "Z":
                    break
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        if signame == "SIGSTOP":
            os.kill(ranks[1], signal.SIGKILL)
        code = job.wait(timeout=60)
    finally:
        job.kill()
    assert elapsed < 60, elapsed
    assert code not in (0, 143), job.output()[-4000:]
    if signame == "SIGSTOP":  # rank 0 noticed on its own (Gloo's timeout) and said so in one line
        assert re.search(r"\[0\]<stderr>:error: worker 0: lost contact with the other workers", job.output()), \
            job.output()[-4000:]
