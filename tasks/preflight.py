"""`invoke preflight`: check a cluster in seconds before training on it.

The same launch command as `invoke run` (tasks/run.py's prepare_job, commands/launch.py), with
`python -m tf_recipes.operations.preflight` in every process instead of the recipe's train.py. See that module for
what is checked; the verdict is preflight.json in the results folder.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from argparse import ArgumentTypeError

from invoke import Exit, task

from commands import choices
from tf_recipes import contract
from tf_recipes.cli import positive_int
from tf_recipes.cli import at_least
from tf_recipes.operations import PREFLIGHT_DEFAULT_DEADLINE, PREFLIGHT_FILE
from tf_recipes.operations.preflight import MIN_DEADLINE, parse_size
from tasks import host
from tasks.run import LAUNCH_HELP, prepare_job

# After --deadline, the processes have ended themselves; a launcher that still runs is stopped.
STOP_GRACE = 30
# Once a rank has written a failed verdict, the launcher gets this long to end the others itself
# (a frozen rank does not answer SIGTERM; horovodrun waits before its SIGKILL).
FAILED_GRACE = 3


def _failed_verdict(results_dir: str) -> bool:
    try:
        with open(os.path.join(results_dir, PREFLIGHT_FILE)) as handle:
            return json.load(handle).get("ok") is False
    except (OSError, ValueError):
        return False


def _signal_group(process, signum) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass


def _execute(argv, env, seconds: float, results_dir: str, local: bool) -> int:
    """Run the job like host.execute, in a process group of its own, but stop it when it outlives
    `seconds`, or FAILED_GRACE seconds after a rank wrote a failed verdict: at once on this machine
    (the check is over), with SIGTERM first for a container client, which passes it on. Whatever of
    the group is left then (a frozen rank its launcher gave up on) is killed."""
    host.show(argv, env)
    try:
        process = subprocess.Popen(argv, cwd=host.ROOT, env={**os.environ, **env}, start_new_session=True)
    except FileNotFoundError:
        host.fail(f"{argv[0]} is not installed or not on PATH")
    ends = time.monotonic() + seconds
    try:
        while process.poll() is None and time.monotonic() < ends:
            if _failed_verdict(results_dir):
                ends = min(ends, time.monotonic() + FAILED_GRACE)
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    if process.poll() is None and not local:
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process, signal.SIGKILL)
    return process.wait()


def verdict(results_dir: str, code: int, launcher: str) -> tuple[int, str]:
    """(exit status, message) from the job's status and the preflight.json it wrote."""
    path = os.path.join(results_dir, PREFLIGHT_FILE)
    try:
        with open(path) as handle:
            result = json.load(handle)
    except (OSError, ValueError):
        return (code or contract.EXIT_CLUSTER,
                f"preflight ({launcher}) wrote no {PREFLIGHT_FILE} (status {code})")
    if result.get("ok") and code == 0:
        return contract.EXIT_DONE, f"preflight passed: {path}"
    problems = "; ".join(result.get("problems") or [f"status {code}"])
    return contract.EXIT_CLUSTER, f"preflight ({launcher}) failed: {problems} (details: {path})"


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        **LAUNCH_HELP,
        "recipe": "recipe whose image and launch settings to check (its train.py is not run)",
        "results-dir": "where preflight.json goes (default: results/RECIPE/TIME-preflight-LAUNCHER)",
        "hosts": "several nodes without a scheduler, as for invoke run",
        "deadline": "seconds for the whole check; ranks that never arrived or froze are named after it",
        "sizes": "all-reduce message sizes for the bandwidth table (default 4K,64K,1M,16M)",
        "repeats": "timed all-reduces per size",
        "allow-socket": "do not fail a multi-node GPU job whose NCCL falls back to sockets",
    },
)
def preflight(c, recipe, gpus="0", cpu_replicas="1", launcher=None, runtime="auto", horovod_runner="horovodrun",
              stack="auto", base=None, image=None, results_dir=None, hosts=None, node_index="0", port_base="23456",
              deadline=str(PREFLIGHT_DEFAULT_DEADLINE), sizes=None, repeats="3", allow_socket=False,
              dry=False):
    """Check the cluster RECIPE would run on: hosts, devices, versions, one exact all-reduce, bandwidth."""
    # The checks tf_recipes.operations.preflight makes, here too: a bad value ends before a folder or a process exists.
    try:
        seconds = float(deadline)
    except ValueError:
        host.fail(f"--deadline {deadline!r} is not a number of seconds")
    try:
        at_least(MIN_DEADLINE)(str(deadline))
    except ArgumentTypeError as error:
        host.fail(f"--deadline: {error} (seconds)")
    try:
        repeats = positive_int(str(repeats))
    except ArgumentTypeError as error:
        host.fail(f"--repeats: {error}")
    try:
        if sizes and not [parse_size(size) for size in sizes.split(",") if size.strip()]:
            raise ValueError(f"{sizes!r} holds no message size, such as 4K,64K")
    except ValueError as error:
        host.fail(f"--sizes: {error}")
    args = ["--deadline", f"{seconds:g}", "--repeats", str(repeats), "--run-id", host.stamp()]
    args += ["--sizes", sizes] if sizes else []
    args += ["--allow-socket"] if allow_socket else []
    job = prepare_job(c, recipe, "preflight", args, gpus=gpus, cpu_replicas=cpu_replicas, launcher=launcher,
                      runtime=runtime, horovod_runner=horovod_runner, base=base, image=image, data_dir=None,
                      results_dir=results_dir, hosts=hosts, node_index=node_index, port_base=port_base,
                      stack=stack, dry=dry, module=choices.PREFLIGHT_MODULE)
    if dry:
        host.show(job.argv, job.env)
        return
    host.make_folder("--results-dir", job.results_dir)
    code = _execute(job.argv, job.env, seconds + STOP_GRACE, job.results_dir, job.runtime == "local")
    status, message = verdict(job.results_dir, code, job.launcher)
    if status:
        raise Exit(f"error: {message}", code=status)
    print(message)
