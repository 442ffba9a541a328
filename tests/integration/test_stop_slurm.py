"""A SLURM job of two nodes stopped early resumes by itself, on the real cluster (ci/slurm-cluster.sh).

The script `invoke sbatch --requeue` renders runs mnist-cnn as two multiworker srun tasks, one on each
node, two CPUs each. `scancel --signal=USR1` (what `#SBATCH --signal=USR1@...` does before the time
limit) stops both tasks after the same step with a checkpoint and status 143; the script requeues the
job, which keeps its id and results folder, resumes from the checkpoint on both nodes and ends with the
fingerprints of the same job never stopped.
"""
import pathlib
import re
import subprocess
import time

import pytest

from helpers import assert_ok, read_results
from test_slurm_cluster import Job, render, submit_script

# In the full tier only: the longer stop cases are the night's (a requeue waits minutes); every push stops
# and resumes a job (test_stop_resume.py).
pytestmark = [pytest.mark.slow, pytest.mark.full]
TRAIN = ["--synthetic", "--batch-size", "32", "--max-steps", "80", "--log-every", "1"]


@pytest.fixture
def submit(two_nodes, tmp_path):
    """submit(): render the --requeue multiworker script for 2 nodes, submit it, return the Job (not waited for)."""
    jobs = []

    def submit() -> Job:
        script = render(tmp_path, "multiworker", *TRAIN, nodes=2, cpus_per_task=2, options=["--requeue"],
                        name=f"job{len(jobs)}.sbatch")
        jobs.append(submit_script(script))
        return jobs[-1]

    yield submit
    for job in jobs:
        subprocess.run(["scancel", job.id], timeout=60)
        job.remove_files()


def controller_log(job: Job) -> str:
    """slurmctld's lines about the job: why SLURM requeued or ended it."""
    try:
        lines = pathlib.Path("/var/log/slurm/slurmctld.log").read_text(errors="replace").splitlines()
    except OSError as error:
        return f"\n(no slurmctld log: {error})"
    return "\n--- slurmctld ---\n" + "\n".join(line for line in lines if f"JobId={job.id} " in line + " ")


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

    # Both tasks (one per node) stopped after the same step, once; the script requeued the job once; the
    # next run resumed there, again on both nodes. (SLURM itself may requeue a job whose launch failed on
    # a loaded machine: Restarts counts those too, the log says which were the script's.)
    stops = re.findall(r"^([01]): stopped at step (\d+) of", log, re.M)
    assert sorted(task for task, _ in stops) == ["0", "1"] and len({step for _, step in stops}) == 1, \
        job.describe() + controller_log(job)
    step = int(stops[0][1])
    assert log.count(f"requeueing job {job.id}") == 1, job.describe() + controller_log(job)
    assert int(job.fields["Restarts"]) >= 1, job.describe() + controller_log(job)
    assert re.search(rf"^0: resumed from \S+ckpt-{step} at step {step}$", log, re.M), job.describe()
    results = read_results(job.results)
    assert (results["nodes"], results["workers"], results["start_step"], results["steps"]) == (2, 2, step, 80), results
    assert results["replica_fingerprints"] == read_results(whole.results)["replica_fingerprints"]
    print(f"job {job.id}: stopped at step {step} of 80, requeued, resumed; uninterrupted job {whole.id}: "
          f"{whole.elapsed:.0f} s, stopped and resumed: {job.elapsed:.0f} s after the signal")
