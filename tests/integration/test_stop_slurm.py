"""A SLURM job stopped early resumes by itself, on the real one-node cluster (ci/slurm-cluster.sh).

The script `invoke sbatch --requeue` renders runs mnist-cnn as two multiworker srun tasks.
`scancel --signal=USR1` (what `#SBATCH --signal=USR1@...` does before the time limit) stops both tasks
after the same step with a checkpoint and status 143; the script requeues the job, which keeps its id
and results folder, resumes from the checkpoint and ends with the fingerprints of a job that was never
stopped.
"""
import re
import subprocess
import time

import pytest

from helpers import assert_ok, read_results, run_invoke
from test_slurm_cluster import RECIPE, Job, slurm_cluster, submit_script  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow
TRAIN = ["--synthetic", "--batch-size", "32", "--max-steps", "80", "--log-every", "1"]


@pytest.fixture
def submit(slurm_cluster, tmp_path):
    """submit(): render the --requeue multiworker script, submit it, return the Job (not waited for)."""
    jobs = []

    def submit() -> Job:
        script = tmp_path / f"job{len(jobs)}.sbatch"
        assert_ok(run_invoke("sbatch", RECIPE, "--launcher", "multiworker", "--nodes", "1", "--gpus-per-node", "0",
                             "--tasks-per-node", "2", "--cpus-per-task", "1", "--requeue", "--out", str(script),
                             "--", *TRAIN))
        jobs.append(submit_script(script))
        return jobs[-1]

    yield submit
    for job in jobs:
        subprocess.run(["scancel", job.id], timeout=60)
        job.remove_files()


def wait_for_log(job: Job, pattern: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, job.log(), re.M):
        assert time.monotonic() < deadline, f"no {pattern!r} within {timeout} s\n{job.log()[-4000:]}"
        time.sleep(0.5)


def test_a_signalled_job_requeues_itself_and_resumes_exactly(submit):
    whole = submit().wait()
    assert (whole.state, whole.exit_code) == ("COMPLETED", 0), whole.describe()

    job = submit()
    wait_for_log(job, r"^0: step +10/")
    assert_ok(subprocess.run(["scancel", "--signal=USR1", job.id], capture_output=True, text=True, timeout=60))
    job.wait()
    log = job.log()
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.describe()
    assert int(job.fields["Restarts"]) == 1, job.describe()

    # Both tasks stopped after the same step; the script requeued the job; the second run resumed there.
    steps = {task: int(step) for task, step in re.findall(r"^([01]): stopped at step (\d+) of", log, re.M)}
    assert sorted(steps) == ["0", "1"] and len(set(steps.values())) == 1, job.describe()
    step = steps["0"]
    assert f"requeueing job {job.id}" in log, job.describe()
    assert re.search(rf"^0: resumed from \S+ckpt-{step} at step {step}$", log, re.M), job.describe()
    results = read_results(job.results)
    assert results["start_step"] == step and results["steps"] == 80
    assert results["replica_fingerprints"] == read_results(whole.results)["replica_fingerprints"]
