"""Settings that cannot work end a train.py before it builds anything: GPUs asked for that
TensorFlow does not see (no silent CPU fallback), and cluster variables (TF_CONFIG, SLURM) that
name an impossible worker. Each ends with exit 2 and one line naming the value."""
import json
import os
import subprocess
import sys

import pytest

from error_checks import assert_one_line_error
from helpers import run_invoke

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = ["--synthetic", "--max-steps", "5"]


def test_gpus_asked_for_but_not_seen_end_in_one_line(tmp_path):
    results = tmp_path / "run"
    process = run_invoke("run", "mnist-cnn", "--gpus", "2", "--runtime", "local", "--results-dir", str(results),
                         "--", *MNIST)
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    errors = [line for line in process.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "asked for 2 GPU(s)" in errors[0] and "sees 0" in errors[0], process.stderr
    assert "--gpus" in errors[0] and "CUDA_VISIBLE_DEVICES" in errors[0]
    assert not (results / "results.json").exists()


def _train(tmp_path, env, *args):
    results = tmp_path / "results"
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "TF_CONFIG", "TF_RECIPES_", "JOB_COMPLETION"))}
    process = subprocess.run([sys.executable, "recipes/mnist-cnn/train.py", *args, *MNIST,
                              "--results-dir", str(results)], cwd=ROOT, capture_output=True, text=True,
                             env={**environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "1", **env}, timeout=300)
    return process, results


SLURM_OK = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_TASKS_PER_NODE": "2"}
BAD = {
    "tf-config-index": ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                                                  "task": {"type": "worker", "index": 5}})}, "index 5"),
    "tf-config-json": ({"TF_CONFIG": "{not json"}, "not valid JSON"),
    "tf-config-twice": ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:1", "localhost:1"]},
                                                  "task": {"type": "worker", "index": 0}})}, "localhost:1"),
    "slurm-procid": ({**SLURM_OK, "SLURM_PROCID": "two"}, "SLURM_PROCID='two'"),
    "slurm-procid-range": ({**SLURM_OK, "SLURM_PROCID": "2"}, "SLURM_PROCID=2 is not below SLURM_STEP_NUM_TASKS=2"),
    "slurm-tasks": ({**SLURM_OK, "SLURM_STEP_TASKS_PER_NODE": "x"}, "SLURM_STEP_TASKS_PER_NODE='x'"),
    "indexed-job": ({"JOB_COMPLETION_INDEX": "3", "TF_RECIPES_WORKERS": "2",
                     "TF_RECIPES_WORKER_HOST_PATTERN": "job-{index}.job", "TF_RECIPES_WORKER_PORT": "2222"},
                    "JOB_COMPLETION_INDEX=3"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_cluster_settings_end_in_one_line(tmp_path, case):
    env, needle = BAD[case]
    process, results = _train(tmp_path, env, "--launcher", "multiworker")
    assert_one_line_error(process, results, needle)


@pytest.mark.docker
@pytest.mark.slow
def test_gpus_missing_in_docker_end_in_one_line(mnist_image):
    # `docker run` without --gpus: what a container runtime left without GPUs looks like (this engine
    # has no GPU driver, so `invoke run --gpus 2 --runtime docker` is refused by Docker itself, 125).
    process = subprocess.run(["docker", "run", "--rm", "-e", "TF_RECIPES_GPUS_PER_PROCESS=1",
                              "-e", "TF_CPP_MIN_LOG_LEVEL=1", mnist_image, "python", "recipes/mnist-cnn/train.py",
                              "--launcher", "single", *MNIST, "--results-dir", "/tmp/run"],
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 2, process.stderr[-3000:]
    errors = [line for line in process.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "asked for 1 GPU(s)" in errors[0] and "sees 0" in errors[0], process.stderr
    assert "Traceback" not in process.stderr
