"""The sbatch script `invoke sbatch` renders, submitted to a real one-node SLURM cluster.

`bash ci/slurm-cluster.sh` (root, Debian 12) starts the cluster: munged, slurmctld and slurmd on this
machine. The job runs `srun python recipes/mnist-cnn/train.py --launcher multiworker` as two tasks on
CPU; each task finds the cluster through TensorFlow's SlurmClusterResolver (SLURM_* variables, no
TF_CONFIG), and the chief writes results.json under results/mnist-cnn/slurm-JOBID/.
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

from helpers import REPO, RESULT_FIELDS, assert_ok, read_results, run_invoke

RECIPE = "mnist-cnn"
JOB_TIMEOUT = 900  # seconds from submission to the end of the job; the machine may be shared
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE"}


def cluster_problem() -> str | None:
    """Why no job can run here, or None when the cluster has a node ready for it."""
    if not shutil.which("sbatch"):
        return "sbatch is not installed"
    try:
        info = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "sinfo got no answer from slurmctld within 60 s"
    if info.returncode != 0:
        return f"sinfo failed: {info.stderr.strip()[-300:]}"
    states = info.stdout.split()
    if not {"idle", "mix"} & set(states):
        return f"no node is idle (sinfo states: {' '.join(states) or 'none'})"
    return None


@pytest.fixture(scope="module")
def slurm_cluster():
    # ci/test.sh starts the cluster and sets TF_RECIPES_STRICT=1: there a missing cluster fails the
    # run instead of skipping; elsewhere the skip says how to start one.
    problem = cluster_problem()
    if problem:
        message = f"no SLURM cluster ({problem}): run `bash ci/slurm-cluster.sh` as root"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)


def job_fields(job_id: str) -> dict:
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True,
                           timeout=60)
    assert_ok(shown)
    return dict(re.findall(r"(\w+)=(\S*)", shown.stdout))


class Job:
    """One submitted batch job: its fields from `scontrol show job`, output file and results folder."""

    def __init__(self, job_id: str):
        self.id = job_id
        self.output = REPO / f"tf-recipes-{RECIPE}-{job_id}.out"  # the script's --output=%x-%j.out
        self.results = REPO / "results" / RECIPE / f"slurm-{job_id}"
        self.fields: dict = {}
        self.elapsed = 0.0

    def wait(self) -> "Job":
        start = time.monotonic()
        while True:
            self.fields = job_fields(self.id)
            if self.fields.get("JobState") in ENDED:
                self.elapsed = time.monotonic() - start
                return self
            if time.monotonic() - start > JOB_TIMEOUT:
                subprocess.run(["scancel", self.id], timeout=60)
                pytest.fail(f"job {self.id} still {self.fields.get('JobState')} "
                            f"(reason {self.fields.get('Reason')}) after {JOB_TIMEOUT} s; cancelled it\n"
                            f"{self.log()[-4000:]}")
            time.sleep(1)

    @property
    def state(self) -> str:
        return self.fields["JobState"]

    @property
    def exit_code(self) -> int:
        return int(self.fields["ExitCode"].split(":")[0])  # EXIT:SIGNAL of the batch script

    def log(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else "(no output file)"

    def describe(self) -> str:
        return (f"job {self.id}: {self.state}, ExitCode {self.fields.get('ExitCode')}, "
                f"RunTime {self.fields.get('RunTime')}\n--- {self.output.name} ---\n{self.log()[-6000:]}")

    def remove_files(self):
        shutil.rmtree(self.results, ignore_errors=True)
        self.output.unlink(missing_ok=True)


def submit_script(script, tf_log_level="2") -> Job:
    """`sbatch` the script from the repository root; the Job, not waited for.

    The script runs `python`: the tasks must find this interpreter (the venv with TensorFlow), so its
    folder leads PATH and the job inherits the environment. SLURM_LABELIO makes srun prefix every
    output line with its task number."""
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "SLURM_LABELIO": "1", "TF_CPP_MIN_LOG_LEVEL": tf_log_level}
    submitted = subprocess.run(["sbatch", "--parsable", "--export=ALL", str(script)], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=60)
    assert_ok(submitted)
    return Job(submitted.stdout.strip().split(";")[0])


@pytest.fixture
def submit(slurm_cluster, tmp_path):
    """submit(TRAIN_ARGS): render the multiworker script, submit it from the repository root, wait."""
    jobs = []

    def submit(*train_args) -> Job:
        script = tmp_path / "job.sbatch"
        # One node, two worker tasks on CPU. One core per task: the test node may have only two.
        assert_ok(run_invoke("sbatch", RECIPE, "--launcher", "multiworker", "--nodes", "1", "--gpus-per-node", "0",
                             "--tasks-per-node", "2", "--cpus-per-task", "1", "--out", str(script),
                             "--", *train_args))
        job = submit_script(script, tf_log_level="0")  # TensorFlow's own log shows each task's server
        jobs.append(job)
        return job.wait()

    yield submit
    for job in jobs:
        job.remove_files()


def test_multiworker_job_trains_with_two_srun_tasks(submit):
    job = submit("--synthetic", "--max-steps", "5", "--log-every", "1")
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.describe()
    print(f"job {job.id}: RunTime {job.fields['RunTime']}, {job.elapsed:.0f} s from submission to end")

    results = read_results(job.results)
    assert RESULT_FIELDS <= set(results), job.describe()
    assert (results["launcher"], results["workers"], results["replicas"], results["nodes"], results["steps"]) == \
        ("multiworker", 2, 2, 1, 5), results
    fingerprints = results["replica_fingerprints"]
    assert len(fingerprints) == 2 and fingerprints[0] == fingerprints[1], fingerprints

    # Two tasks ran: each labelled its lines and started its own worker server (ports 8888, 8889).
    log = job.log()
    for task in (0, 1):
        assert re.search(rf"^{task}: .*Started server with target: grpc://\S+:{8888 + task}$", log, re.M), \
            job.describe()
    assert re.search(r"^0: mnist-cnn: launcher multiworker, 2 process\(es\), 2 replica\(s\)", log, re.M), \
        job.describe()


def test_failing_workers_fail_the_job(submit):
    # --batch-size 0 is rejected by every task's argument parser: srun fails, and so must the job.
    job = submit("--synthetic", "--max-steps", "5", "--batch-size", "0")
    assert job.state == "FAILED" and job.exit_code != 0, job.describe()
    assert re.search(r"^[01]: .*--batch-size", job.log(), re.M), job.describe()
    assert not (job.results / "results.json").exists()


@pytest.mark.parametrize("time", ["30", "30:00", "04:00:00", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED"])
def test_sbatch_accepts_every_time_invoke_sbatch_renders(slurm_cluster, tmp_path, time):
    script = tmp_path / "job.sbatch"
    assert_ok(run_invoke("sbatch", RECIPE, "--launcher", "multiworker", "--gpus-per-node", "0", "--cpus-per-task", "1",
                         "--time", time, "--requeue", "--out", str(script)))
    checked = subprocess.run(["sbatch", "--test-only", str(script)], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0 and "to start at" in checked.stderr, checked.stderr


@pytest.mark.parametrize("time", ["abc", "1:2:3:4"])
def test_a_time_invoke_sbatch_refuses_is_one_sbatch_rejects(slurm_cluster, tmp_path, time):
    refused = run_invoke("sbatch", RECIPE, "--time", time)
    assert refused.returncode == 2 and refused.stdout == "" and f"--time '{time}'" in refused.stderr
    script = tmp_path / "job.sbatch"
    assert_ok(run_invoke("sbatch", RECIPE, "--launcher", "multiworker", "--gpus-per-node", "0", "--cpus-per-task", "1",
                         "--out", str(script)))
    script.write_text(script.read_text().replace("--time=01:00:00", f"--time={time}"))
    checked = subprocess.run(["sbatch", "--test-only", str(script)], cwd=REPO, capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode != 0 and "Invalid --time specification" in checked.stderr, checked.stderr
