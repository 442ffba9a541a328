"""`invoke preflight` for real, on the CPU: 2 processes under multiworker and under horovod pass with
the exact all-reduce sum; a multiworker cluster with a rank that never started, and a horovod job
with a rank frozen (SIGSTOP) after it started, both end with status 4 within the deadline, naming
that rank. And the `--preflight` step of a rendered sbatch script, on the one-node SLURM cluster."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tf_recipes import contract
from tf_recipes.operations import preflight
from tf_recipes.operations import PREFLIGHT_FILE
from tf_recipes.operations.spawn import free_ports, worker_environments
from helpers import REPO, assert_ok, read_results, run_invoke
from jobs import Job
from test_slurm_cluster import submit_script

pytestmark = pytest.mark.slow
# TensorFlow's C++ ERROR lines from the cluster machinery (as in test_cluster_failures.py).
CLUSTER_ERROR = re.compile(r"^(?:\[\d+\]<stderr>:)?(?:\d{4}-\d\d-\d\d [\d:.]+: E |E\d{4} ).*"
                           r"(coordination|collective|ring_alg|heartbeat|grpc|gloo|horovod)", re.I)


def gone(pid, seconds=10) -> bool:
    """Whether process `pid` ended (or is a zombie waiting to be reaped) within `seconds`."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.2)
    return False


def read_verdict(results_dir):
    with open(os.path.join(results_dir, PREFLIGHT_FILE)) as handle:
        return json.load(handle)


# Every push checks multiworker's; horovod's all-reduce is proven per push by the parity runs and the frozen rank.
@pytest.mark.parametrize("launcher", ["multiworker", pytest.param("horovod", marks=pytest.mark.full)])
def test_two_processes_pass_with_the_exact_sum(launcher, tmp_path, request):
    if launcher == "horovod":
        request.getfixturevalue("require_horovod")
    started = time.monotonic()
    process = run_invoke("preflight", "mnist-cnn", "--gpus", "0", "--cpu-replicas", "2", "--launcher", launcher,
                         "--runtime", "local", "--results-dir", str(tmp_path), "--deadline", "60",
                         "--sizes", "4K,1M", "--repeats", "2", timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert_ok(process)
    assert time.monotonic() - started < 60
    result = read_verdict(tmp_path)
    assert result["ok"] and result["status"] == contract.EXIT_DONE and result["problems"] == []
    assert (result["launcher"], result["processes"], result["replicas"], result["expected_sum"]) == (launcher, 2, 2, 3)
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert len({r["pid"] for r in result["ranks"]}) == 2
    for rank in result["ranks"]:
        assert rank["allreduce"]["got"] == [3.0]  # 1 + 2, exactly
        assert rank["versions"]["tensorflow"] and rank["versions"]["cuda"] == "none"
        assert rank["nccl"]["transport"] is None and rank["gpus"] == []
    beats = [json.loads((tmp_path / preflight.RANKS_DIR / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(b["rank"], b["stage"]) for b in beats] == [(0, "done"), (1, "done")]
    assert [row["bytes"] for row in result["bandwidth"]] == [4096, 2 ** 20]
    assert all(row["median_ms"] > 0 and row["repeats"] == 2 for row in result["bandwidth"])
    # The table printed is the table of what preflight.json holds.
    table = preflight.render_table(result)
    printed = "\n".join(re.sub(r"^\[\d+\]<stdout>:", "", line) for line in process.stdout.splitlines())
    assert table.strip() in printed, printed[-3000:]
    assert "3 (expected 3)" in printed
    noisy = [line for line in process.stderr.splitlines() if CLUSTER_ERROR.match(line)]
    assert not noisy, "\n".join(noisy)


def test_a_rank_that_never_started_is_named_within_the_deadline(tmp_path):
    """A TF_CONFIG cluster of 2, only worker 0 started."""
    env = worker_environments(2, free_ports(2))[0]
    started = time.monotonic()
    process = subprocess.run(
        [sys.executable, "-m", "tf_recipes.operations.preflight", "--launcher", "multiworker", "--deadline", "20",
         "--results-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, **env, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"})
    elapsed = time.monotonic() - started
    assert process.returncode == contract.EXIT_CLUSTER, process.stderr[-3000:]
    assert elapsed < 20, elapsed
    errors = [line for line in process.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: preflight: rank 1 never arrived"), process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    result = read_verdict(tmp_path)
    assert not result["ok"] and result["failed_stage"] == "joining" and list(result["heartbeats"]) == ["0"]


def test_a_frozen_horovod_rank_is_named_within_the_deadline(tmp_path, require_horovod):
    deadline = 20
    job = Job("preflight", "mnist-cnn", "--gpus", "0", "--cpu-replicas", "2", "--launcher", "horovod",
              "--runtime", "local", "--results-dir", str(tmp_path), "--deadline", str(deadline))
    heartbeat = tmp_path / preflight.RANKS_DIR / "rank-1.json"
    try:
        started = time.monotonic()
        while True:  # rank 1 started and is about to join the others: freeze it
            assert time.monotonic() - started < 60 and job.process.poll() is None, job.output()[-4000:]
            try:
                beat = json.loads(heartbeat.read_text())
            except (OSError, ValueError):
                beat = {}
            if beat.get("stage") == "joining":
                os.kill(beat["pid"], signal.SIGSTOP)
                break
            time.sleep(0.05)
        job.process.wait(timeout=deadline + 40)
        ended = time.time()
        code = job.wait(timeout=30)  # and its output, which the frozen rank holds until it is killed
    finally:
        job.kill()
    assert code == contract.EXIT_CLUSTER, job.output()[-4000:]
    # The deadline counts from each process's start (its heartbeat's), after horovodrun started it and it
    # imported TensorFlow, which a loaded machine makes slow; then horovodrun ends the others.
    chief = json.loads((tmp_path / preflight.RANKS_DIR / "rank-0.json").read_text())
    assert ended - chief["started"] < deadline + 6, (ended - chief["started"], job.output()[-4000:])
    assert gone(beat["pid"]), "the frozen rank was left behind"
    result = read_verdict(tmp_path)
    assert "rank 1 (" in result["problems"][0] and f"pid {beat['pid']}) froze at stage joining" in result["problems"][0]
    assert "error: preflight (horovod) failed: rank 1 (" in "".join(job.stderr)


@pytest.mark.full  # the night's: every push runs one two-node job and `invoke preflight` itself
def test_the_sbatch_preflight_step_checks_the_tasks_before_training(slurm_cluster, tmp_path):
    script = tmp_path / "job.sbatch"
    assert_ok(run_invoke("sbatch", "mnist-cnn", "--launcher", "multiworker", "--nodes", "1", "--gpus-per-node", "0",
                         "--tasks-per-node", "2", "--cpus-per-task", "1", "--preflight", "--out", str(script),
                         "--", "--synthetic", "--max-steps", "2"))
    job = submit_script(script).wait()
    try:
        assert (job.state, job.exit_code) == ("COMPLETED", 0), job.describe()
        result = read_verdict(job.results)
        assert result["ok"] and [r["rank"] for r in result["ranks"]] == [0, 1], result
        assert [r["allreduce"]["got"] for r in result["ranks"]] == [[3.0], [3.0]]
        log = job.log()
        assert log.index("0: preflight: multiworker, 2 process(es), 2 replica(s) on 1 node(s): OK") < \
            log.index("0: mnist-cnn: launcher multiworker"), job.describe()
        assert read_results(job.results)["steps"] == 2
    finally:
        job.remove_files()
