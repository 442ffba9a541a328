"""The sbatch scripts `invoke sbatch` renders, submitted to a real SLURM cluster of two nodes.

`bash ci/slurm-cluster.sh` (root, Debian 12) starts the cluster: munged, slurmctld and one slurmd per
node, each node in its own network namespace with its own address (tfr-node1 is the host). A job runs
`srun python "$RECIPE_DIR/train.py"` (recipes/mnist-cnn) on CPU: under multiworker each task finds the cluster through
TensorFlow's SlurmClusterResolver (SLURM_* variables, no TF_CONFIG); under horovod `srun --mpi=pmix`
starts the ranks and OpenMPI wires them up through PMIx. The chief writes results.json under
results/mnist-cnn/slurm-JOBID/.

One one-node job (two tasks) is shared: its own checks, and the reference the two-node jobs (one task
on each node) must end with, weight for weight, under multiworker and under horovod alike. Every job
gives each task one CPU, as the reference does: TensorFlow splits its sums over as many threads as the
task may use, so another CPU count ends with other last bits.
"""
import importlib.util
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


def cluster_problem(nodes: int = 1) -> str | None:
    """Why no job of `nodes` nodes can run here, or None when the cluster has that many nodes up."""
    if not shutil.which("sbatch"):
        return "sbatch is not installed"
    try:
        info = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N %t"], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        return "sinfo got no answer from slurmctld within 60 s"
    if info.returncode != 0:
        return f"sinfo failed: {info.stderr.strip()[-300:]}"
    states = dict(line.split() for line in set(info.stdout.splitlines()) if line.strip())
    # A node running other jobs still takes this one (it waits); down, drained or unknown nodes do not.
    up = [node for node, state in states.items() if state in {"idle", "mix", "alloc", "comp"}]
    if len(up) < nodes:
        shown = " ".join(f"{node}={state}" for node, state in sorted(states.items())) or "none"
        return f"{len(up)} node(s) up, {nodes} needed (sinfo: {shown})"
    return None


def require_cluster(nodes: int) -> None:
    # ci/test.sh starts the cluster and sets TF_RECIPES_STRICT=1: there a missing cluster fails the
    # run instead of skipping; elsewhere the skip says how to start one.
    problem = cluster_problem(nodes)
    if problem:
        message = f"no SLURM cluster of {nodes} node(s) ({problem}): run `bash ci/slurm-cluster.sh` as root"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def slurm_cluster():
    require_cluster(1)


@pytest.fixture(scope="module")
def two_nodes(slurm_cluster):
    require_cluster(2)


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


def submit_script(script, tf_log_level="2", env=None) -> Job:
    """`sbatch` the script from the repository root; the Job, not waited for.

    The script runs `python`: the tasks must find this interpreter (the venv with TensorFlow), so its
    folder leads PATH and the job inherits the environment. SLURM_LABELIO makes srun prefix every
    output line with its task number. `env`: more variables for the job."""
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "SLURM_LABELIO": "1", "TF_CPP_MIN_LOG_LEVEL": tf_log_level, **(env or {})}
    submitted = subprocess.run(["sbatch", "--parsable", "--export=ALL", str(script)], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=60)
    assert_ok(submitted)
    return Job(submitted.stdout.strip().split(";")[0])


def render(folder, launcher, *train_args, nodes=1, tasks_per_node=1, cpus_per_task=1, options=(), name=None):
    """`invoke sbatch` on CPU nodes (`options`: more of its flags): the script's path."""
    script = folder / (name or f"{launcher}-{nodes}x{tasks_per_node}x{cpus_per_task}.sbatch")
    assert_ok(run_invoke("sbatch", RECIPE, "--launcher", launcher, "--nodes", str(nodes), "--gpus-per-node", "0",
                         "--tasks-per-node", str(tasks_per_node), "--cpus-per-task", str(cpus_per_task), *options,
                         "--out", str(script), "--", *train_args))
    return script


@pytest.fixture
def submit(slurm_cluster, tmp_path):
    """submit(TRAIN_ARGS): render the one-node multiworker script, submit it from the repository root, wait."""
    jobs = []

    def submit(*train_args) -> Job:
        # One node, two worker tasks on CPU. One core per task: the test node may have only two.
        script = render(tmp_path, "multiworker", *train_args, tasks_per_node=2)
        job = submit_script(script, tf_log_level="0")  # TensorFlow's own log shows each task's server
        jobs.append(job)
        return job.wait()

    yield submit
    for job in jobs:
        job.remove_files()


TRAIN = ["--synthetic", "--max-steps", "5", "--log-every", "1"]


@pytest.fixture(scope="module")
def one_node_job(slurm_cluster, tmp_path_factory):
    """mnist-cnn under multiworker as two srun tasks on one node, one CPU each; ended."""
    job = submit_script(render(tmp_path_factory.mktemp("one-node"), "multiworker", *TRAIN, tasks_per_node=2),
                        tf_log_level="0").wait()  # TensorFlow's own log shows each task's server
    yield job
    job.remove_files()


def test_multiworker_job_trains_with_two_srun_tasks(one_node_job):
    job = one_node_job
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


def horovod_mpi_problem() -> str | None:
    """Why this venv's Horovod cannot start its ranks under srun (it needs its MPI controller), or None.
    Read from the extension's shared-library list, without importing TensorFlow."""
    spec = importlib.util.find_spec("horovod")
    if spec is None:
        return "Horovod is not installed"
    extensions = list(pathlib.Path(spec.origin).parent.glob("tensorflow/mpi_lib*.so"))
    if not extensions or b"libmpi.so" not in extensions[0].read_bytes():
        return "this Horovod was built without MPI"
    return None


@pytest.fixture(scope="module")
def horovod_with_mpi():
    problem = horovod_mpi_problem()
    if problem:
        message = f"{problem}; srun starts Horovod ranks through MPI: run `bash ci/setup.sh --horovod`"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)


def assert_two_node_job_trained_like(job: Job, launcher: str, reference: Job) -> None:
    """The job ended well, ran 2 workers on 2 nodes for 5 steps, and ended with the reference's weights."""
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.describe()
    results = read_results(job.results)
    assert (results["launcher"], results["workers"], results["nodes"], results["steps"]) == \
        (launcher, 2, 2, 5), results
    assert results["replica_fingerprints"] == read_results(reference.results)["replica_fingerprints"], job.describe()


def test_multiworker_runs_one_task_on_each_of_two_nodes(two_nodes, one_node_job, tmp_path):
    job = submit_script(render(tmp_path, "multiworker", *TRAIN, nodes=2), tf_log_level="0").wait()
    try:
        # The same global batch (2 x 128) over the same data: the weights of the one-node job, bit for bit.
        assert_two_node_job_trained_like(job, "multiworker", one_node_job)
        # One task per node, each with its own address: both servers listen on port 8888.
        log = job.log()
        for task in (0, 1):
            assert re.search(rf"^{task}: .*Started server with target: grpc://\S+:8888$", log, re.M), job.describe()
        print(f"job {job.id} on {job.fields['NodeList']}: {job.elapsed:.0f} s from submission to end")
    finally:
        job.remove_files()


@pytest.mark.full  # the night's: every push runs one two-node job (multiworker, above) and horovod locally
def test_horovod_ranks_start_through_srun_mpi_pmix_on_two_nodes(two_nodes, horovod_with_mpi, one_node_job, tmp_path):
    script = render(tmp_path, "horovod", *TRAIN, nodes=2)
    assert re.search(r'^srun --kill-on-bad-exit=1 --mpi=pmix python "\$RECIPE_DIR/train.py" --launcher horovod ',
                     script.read_text(), re.M)
    job = submit_script(script).wait()
    try:
        # nodes is Horovod's cross_size: OpenMPI saw the two ranks on two nodes. Horovod sums the same
        # gradients as MultiWorkerMirroredStrategy: the one-node multiworker weights.
        assert_two_node_job_trained_like(job, "horovod", one_node_job)
        assert re.search(r"^0: mnist-cnn: launcher horovod, 2 process\(es\), 2 replica\(s\)", job.log(), re.M), \
            job.describe()
        print(f"job {job.id} on {job.fields['NodeList']}: {job.elapsed:.0f} s from submission to end")
    finally:
        job.remove_files()


# Each task prints its node, its SLURM_PROCID and how many CPUs the kernel lets it run on.
CPU_PROBE = ("python -c 'import os; print(\"cpus\", os.environ[\"SLURMD_NODENAME\"], os.environ[\"SLURM_PROCID\"], "
             "len(os.sched_getaffinity(0)))'")


@pytest.mark.full  # the night's: a second two-node job
def test_every_srun_task_may_use_the_cpus_per_task_it_asked_for(two_nodes, tmp_path):
    """2 nodes x 1 task x 2 CPUs. The script as rendered, but for what its srun line starts: a probe
    instead of train.py. SLURM_EXACT=1 gives each task only what srun asks for, as tasks that share a
    bigger node get (an explicit --cpus-per-task, which the script's SRUN_CPUS_PER_TASK is, implies
    it anyway); without SRUN_CPUS_PER_TASK, srun of Slurm 22.05 to 23.02 asks for 1 CPU per task."""
    script = render(tmp_path, "multiworker", nodes=2, cpus_per_task=2)
    text = script.read_text()
    assert 'export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-2}"' in text
    probed, count = re.subn(r'(?m)^(srun --kill-on-bad-exit=1) python "\$RECIPE_DIR/train\.py" .*( \|\| status=\$\?)$',
                            lambda m: f"{m[1]} {CPU_PROBE}{m[2]}", text)
    assert count == 1, text
    script.write_text(probed)
    env = {"SLURM_EXACT": "1"}
    job = submit_script(script, env=env).wait()
    try:
        assert (job.state, job.exit_code) == ("COMPLETED", 0), job.describe()
        reports = sorted(re.findall(r"^\d+: cpus (\S+) (\d+) (\d+)$", job.log(), re.M), key=lambda r: r[1])
        assert [(rank, int(cpus)) for _, rank, cpus in reports] == [("0", 2), ("1", 2)], job.describe()
        assert len({node for node, _, _ in reports}) == 2, job.describe()  # one task on each node
        print(f"job {job.id}: {reports}")
    finally:
        job.remove_files()


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
