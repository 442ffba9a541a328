"""SLURM batch scripts for multi-node runs: one `srun` task per GPU (multiworker, horovod) or one task
per node with all its GPUs (mirrored, single node only).

    multiworker  srun python train.py --launcher multiworker   (SlurmClusterResolver reads SLURM_*)
    horovod      srun --mpi=pmix python train.py --launcher horovod   (Horovod's MPI controller)
    mirrored     srun --ntasks=1 python train.py --launcher mirrored

With a .sif image every task runs inside Apptainer (`apptainer exec --nv`), the way HPC sites run
containers; without one, the tasks run the checkout's Python on the compute nodes.
"""
from __future__ import annotations

import shlex

from commands.launch import LaunchError, check_choice

SLURM_LAUNCHERS = ("multiworker", "horovod", "mirrored", "single")


def render_sbatch(recipe: str, launcher: str, *, nodes: int, gpus_per_node: int, train_args=(),
                  sif: str | None = None, data_dir: str | None = None, time: str = "01:00:00",
                  partition: str | None = None, account: str | None = None,
                  cpus_per_task: int = 8, tasks_per_node: int | None = None) -> str:
    """The text of an sbatch script; submit it from the repository root with `sbatch FILE`."""
    check_choice("launcher", launcher, SLURM_LAUNCHERS)
    if nodes < 1 or gpus_per_node < 0:
        raise LaunchError(f"--nodes {nodes} / --gpus-per-node {gpus_per_node}: need nodes >= 1, gpus >= 0")
    if launcher in ("mirrored", "single") and nodes != 1:
        raise LaunchError(f"--launcher {launcher} runs on one node, not {nodes}; use multiworker or horovod")
    # One task per GPU; on CPU-only nodes `tasks_per_node` worker processes (default 1).
    per_node_tasks = 1 if launcher in ("mirrored", "single") else (gpus_per_node or tasks_per_node or 1)
    directives = [
        f"--job-name=tf-recipes-{recipe}",
        f"--nodes={nodes}",
        f"--ntasks-per-node={per_node_tasks}",
        f"--cpus-per-task={cpus_per_task}",
        f"--time={time}",
        "--output=%x-%j.out",
    ]
    if gpus_per_node:
        directives.insert(3, f"--gpus-per-node={gpus_per_node}")
    directives += [f"--partition={partition}"] if partition else []
    directives += [f"--account={account}"] if account else []

    inside = bool(sif)
    train = ["python", f"recipes/{recipe}/train.py", "--launcher", launcher, *train_args,
             "--results-dir", "/results" if inside else '"$RESULTS"']
    if data_dir:
        train += ["--data-dir", "/data" if inside else shlex.quote(data_dir)]
    srun = ["srun"] + (["--mpi=pmix"] if launcher == "horovod" else [])
    if inside:
        binds = ['--bind "$RESULTS":/results'] + ([f"--bind {shlex.quote(data_dir)}:/data:ro"] if data_dir else [])
        # No --cleanenv here: the tasks need SLURM_* (cluster resolver) and PMIX_* (MPI) inside.
        runner = ["apptainer", "exec"] + (["--nv"] if gpus_per_node else []) + binds + \
                 ["--pwd", "/workspace/tf-recipes", shlex.quote(sif)]
    else:
        runner = []
    command = " ".join(srun + runner + [word if word.startswith('"$') else shlex.quote(word) for word in train])
    lines = ["#!/bin/bash"] + [f"#SBATCH {d}" for d in directives] + [
        "",
        f"# {recipe} with --launcher {launcher} on {nodes} node(s) x {gpus_per_node} GPU(s).",
        "# Submit from the tf-recipes checkout: sbatch THIS_FILE",
        "set -euo pipefail",
        'cd "${SLURM_SUBMIT_DIR}"',
        f'RESULTS="$PWD/results/{recipe}/slurm-${{SLURM_JOB_ID}}"',
        'mkdir -p "$RESULTS"',
    ]
    if not inside:
        lines.append('export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"')
    if launcher == "multiworker":
        lines.append("# Each task is one worker; SlurmClusterResolver builds the cluster from SLURM_* and")
        lines.append("# gives each task its GPU. The chief (task 0) writes results.json.")
    elif launcher == "horovod":
        lines.append("# Each task is one Horovod rank (MPI through PMIx); rank 0 writes results.json.")
    lines += [command, ""]
    return "\n".join(lines)
