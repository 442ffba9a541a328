"""SLURM batch scripts for multi-node runs: one `srun` task per GPU (multiworker, horovod) or one task
per node with all its GPUs (mirrored, single node only).

    multiworker  srun python train.py --launcher multiworker   (SlurmClusterResolver reads SLURM_*)
    horovod      srun --mpi=pmix python train.py --launcher horovod   (Horovod's MPI controller; `mpi`
                 names another of the cluster's `srun --mpi=list` plugins, e.g. pmi2)
    mirrored     srun --ntasks=1 python train.py --launcher mirrored

Every task gets `--cpus-per-task` CPUs: the script passes it on to srun (SRUN_CPUS_PER_TASK), which
Slurm 22.05 to 23.02 does not do by itself.

A task runs in one of three ways: the checkout's Python on the compute nodes; inside Apptainer with a
.sif image (`apptainer exec --nv`), as most HPC sites run containers; or inside an Enroot container
started by the Pyxis plugin (`srun --container-image`), as NVIDIA's own clusters do.

Stopping: the script asks SLURM for SIGUSR1 `signal_grace` seconds before the time limit, sent to
every task; the tasks then stop at the same step, checkpoint and exit with 143 (see
common/tf_recipes/stopping.py). With `requeue=True` the script puts the job back in the queue when that
happens; the results folder is keyed by SLURM_JOB_ID, which a requeued job keeps, and train.py always
gets --resume, so the job carries on from the checkpoint by itself.
"""
from __future__ import annotations

import re
import shlex

from commands.choices import PREFLIGHT_MODULE
from commands.containers import mount_path_problem
from commands.launch import LaunchError, ShellWord, build_train_command, check_choice, shell_join
from tf_recipes import contract
from tf_recipes.contract import EXIT_STOPPED, LAUNCHERS, launcher_trait
from tf_recipes.operations import PREFLIGHT_DEFAULT_DEADLINE

DEFAULT_SIGNAL_GRACE = 120

# Every form sbatch's --time takes: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE|infinite|unlimited")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")  # job, account and partition names
_NAMES = re.compile(rf"{_NAME.pattern}(,{_NAME.pattern})*")  # --partition takes a list
DEFAULT_MPI = "pmix"
# srun --mpi plugin names (Slurm 22.05 to 24.11, `srun --mpi=list`), less "none", which starts no MPI ranks:
# pmix is the newest PMIx plugin built, pmix_vN a given PMIx major version, pmi2 for MPI libraries without PMIx.
MPI_PLUGINS = ("pmix", "pmix_v2", "pmix_v3", "pmix_v4", "pmix_v5", "pmi2", "cray_shasta")


def check_sbatch_fields(*, time: str, job_name: str, partition: str | None, account: str | None,
                        signal_grace: int) -> None:
    """Refuse, with a LaunchError naming the value, what sbatch would reject after submission."""
    if not _TIME.fullmatch(time or ""):
        raise LaunchError(f"--time {time!r} is not a SLURM time; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM "
                          "or D-HH:MM:SS, e.g. 04:00:00 or 1-12:00:00")
    if not _NAME.fullmatch(job_name or ""):
        raise LaunchError(f"--job-name {job_name!r} must be letters, digits and . _ + - (no spaces)")
    if partition is not None and not _NAMES.fullmatch(partition):
        raise LaunchError(f"--partition {partition!r} must be a partition name (or a comma-separated "
                          "list), without spaces")
    if account is not None and not _NAME.fullmatch(account):
        raise LaunchError(f"--account {account!r} must be an account name, without spaces")
    if not 1 <= signal_grace <= 65535:
        raise LaunchError(f"--signal-grace {signal_grace} must be 1..65535 seconds before the time limit")


def _check_request(launcher: str, *, nodes: int, gpus_per_node: int, sif: str | None,
                   container_image: str | None, data_dir: str | None, mpi: str) -> None:
    check_choice("launcher", launcher, LAUNCHERS)
    if mpi not in MPI_PLUGINS:
        raise LaunchError(f"--mpi {mpi!r} is not an srun MPI plugin that starts MPI ranks; choose one of: "
                          f"{', '.join(MPI_PLUGINS)} (`srun --mpi=list` prints those your cluster has)")
    if nodes < 1 or gpus_per_node < 0:
        raise LaunchError(f"--nodes {nodes} / --gpus-per-node {gpus_per_node}: need nodes >= 1, gpus >= 0")
    if not launcher_trait(launcher, "multi_node") and nodes != 1:
        raise LaunchError(f"--launcher {launcher} runs on one node, not {nodes}; use multiworker or horovod")
    if sif and container_image:
        raise LaunchError("give --sif (Apptainer) or --container-image (Pyxis), not both")
    if container_image and any(c.isspace() or c == "," for c in container_image):
        raise LaunchError(f"--container-image {container_image!r} must not contain spaces or commas")
    if data_dir and (sif or container_image) and mount_path_problem("--data-dir", data_dir):
        raise LaunchError(mount_path_problem("--data-dir", data_dir))


def _directives(launcher: str, *, job_name: str, nodes: int, gpus_per_node: int, tasks_per_node: int | None,
                cpus_per_task: int, time: str, signal_grace: int, partition: str | None, account: str | None,
                requeue: bool) -> list[str]:
    # One task per node with all its GPUs (one process), or one task per GPU; on CPU-only nodes
    # `tasks_per_node` worker processes (default 1).
    per_node_tasks = 1 if launcher_trait(launcher, "one_process") else (gpus_per_node or tasks_per_node or 1)
    directives = [
        f"--job-name={job_name}",
        f"--nodes={nodes}",
        f"--ntasks-per-node={per_node_tasks}",
        f"--cpus-per-task={cpus_per_task}",
        f"--time={time}",
        "--output=%x-%j.out",
        # Without "B:" SLURM signals the tasks of every step (not the batch shell): they checkpoint.
        f"--signal=USR1@{signal_grace}",
    ]
    if gpus_per_node:
        directives.insert(3, f"--gpus-per-node={gpus_per_node}")
    directives += [f"--partition={partition}"] if partition else []
    directives += [f"--account={account}"] if account else []
    # A requeued job writes to the same output file: append, so that the stopped attempt's log stays.
    directives += ["--requeue", "--open-mode=append"] if requeue else []
    return directives


def _srun_command(recipe: str, launcher: str, train_args, *, gpus_per_node: int, sif: str | None,
                  container_image: str | None, data_dir: str | None, mpi: str = DEFAULT_MPI,
                  module: str | None = None) -> str:
    """The srun line: every task runs train.py (or `python -m MODULE`, the preflight check), on the
    host, in Apptainer or through Pyxis."""
    inside = bool(sif or container_image)
    train_args = list(train_args)
    if "--resume" not in train_args and not module:
        train_args.append("--resume")  # no checkpoint yet: starts at step 0; after a requeue: resumes
    train_args += ["--results-dir", "/results" if inside else ShellWord('"$RESULTS"')]
    if data_dir and not module:
        train_args += ["--data-dir", "/data" if inside else data_dir]
    train = build_train_command(recipe, launcher, train_args, module=module)
    if not inside and not module:  # the checkout's or a copied recipe folder's train.py (see _recipe_dir)
        train[1] = ShellWord('"$RECIPE_DIR/train.py"')
    mpi_ranks = launcher_trait(launcher, "peers_from") == "mpi"  # srun starts them through its MPI plugin
    srun = ["srun", "--kill-on-bad-exit=1"] + ([f"--mpi={mpi}"] if mpi_ranks else [])
    if sif:
        binds = ["--bind", ShellWord('"$RESULTS":/results')] + (["--bind", f"{data_dir}:/data:ro"] if data_dir else [])
        # No --cleanenv here: the tasks need SLURM_* (cluster resolver) and PMIX_* (MPI) inside.
        runner = ["apptainer", "exec"] + (["--nv"] if gpus_per_node else []) + binds + \
                 ["--pwd", "/workspace/tf-recipes", sif]
    elif container_image:
        # Pyxis passes the task's environment (SLURM_*, PMIX_*) into the container, and exposes the
        # node's GPUs that SLURM gave the task.
        mounts = ShellWord('--container-mounts="$RESULTS":/results' +
                           ("," + shlex.quote(f"{data_dir}:/data:ro") if data_dir else ""))
        runner = [f"--container-image={container_image}", mounts, "--container-workdir=/workspace/tf-recipes"]
    else:
        runner = []
    return shell_join(srun + runner + train)


def _environment(launcher: str, *, gpus_per_node: int, cpus_per_task: int, mpi: str) -> list[str]:
    """The script's lines between its results folder and its first srun: what every task inherits."""
    lines = [
        "# Slurm 22.05 to 23.02: srun does not take --cpus-per-task from the job, so tasks can get fewer CPUs",
        "# than asked for; SchedMD's fix is to hand it to srun.",
        f'export SRUN_CPUS_PER_TASK="${{SLURM_CPUS_PER_TASK:-{cpus_per_task}}}"',
        "# The GPUs each task must see; train.py stops with one line (status 2) when TensorFlow sees fewer.",
        f"export {contract.GPUS_PER_PROCESS_ENV}="
        f"{gpus_per_node if launcher_trait(launcher, 'gpus_per_process') == 'all' else min(gpus_per_node, 1)}",
    ]
    peers_from = launcher_trait(launcher, "peers_from")
    if peers_from == "TF_CONFIG":
        lines.append("# Each task is one worker; SlurmClusterResolver builds the cluster from SLURM_* and")
        lines.append("# gives each task its GPU. The chief (task 0) writes results.json.")
    elif peers_from == "mpi":
        lines.append(f"# Each task is one Horovod rank (MPI through srun --mpi={mpi}); rank 0 writes results.json.")
    return lines


def _submit_from(recipe: str, on_host: bool) -> list[str]:
    if not on_host:
        return ["# Submit from the tf-recipes checkout: sbatch THIS_FILE"]
    return [f"# Submit from the tf-recipes checkout (sbatch recipes/{recipe}/launch/THIS_FILE) or from the recipe",
            "# folder, also a copy of it outside the checkout (sbatch launch/THIS_FILE)."]


def _recipe_dir(recipe: str) -> list[str]:
    """Where the tasks find train.py on the host: the recipe folder itself when the script is submitted from
    it (a copy of the folder on its own), else recipes/RECIPE of the checkout it is submitted from."""
    return [
        "# The recipe's folder: the one submitted from when it holds train.py (a copy of the recipe folder on",
        f"# its own, with the tf-recipes library installed), else recipes/{recipe} of the tf-recipes checkout.",
        f"RECIPE_DIR=recipes/{recipe}",
        'if [ -f train.py ]; then RECIPE_DIR=.; fi',
    ]


def _on_stop(requeue: bool) -> list[str]:
    """What the batch script does when the tasks stopped on a signal with a checkpoint."""
    if requeue:
        return [
            f"if [ \"$status\" -eq {EXIT_STOPPED} ]; then",
            "    # Stopped on a signal with a checkpoint: back into the queue, same job id and results folder.",
            '    echo "stopped with a checkpoint in $RESULTS; requeueing job $SLURM_JOB_ID" >&2',
            '    scontrol requeue "$SLURM_JOB_ID"',
            "fi",
        ]
    return [
        f"if [ \"$status\" -eq {EXIT_STOPPED} ]; then",
        '    echo "stopped with a checkpoint in $RESULTS (submit with --requeue to continue by itself)" >&2',
        "fi",
    ]


def render_sbatch(recipe: str, launcher: str, *, nodes: int, gpus_per_node: int, train_args=(),
                  sif: str | None = None, container_image: str | None = None, data_dir: str | None = None,
                  time: str = "01:00:00", partition: str | None = None, account: str | None = None,
                  job_name: str | None = None, cpus_per_task: int = 8, tasks_per_node: int | None = None,
                  signal_grace: int = DEFAULT_SIGNAL_GRACE, requeue: bool = False, preflight: bool = False,
                  preflight_deadline: int = PREFLIGHT_DEFAULT_DEADLINE, mpi: str = DEFAULT_MPI) -> str:
    """The text of an sbatch script; submit it from the repository root with `sbatch FILE` (on the host, also
    from the recipe folder, which may be a copy of it outside the repository).

    `preflight`: a first step, with the same srun and container flags, runs `python -m
    tf_recipes.operations.preflight` in every task; the job ends there (status 4) when the cluster is broken.
    `mpi`: the srun MPI plugin the horovod ranks start through (`srun --mpi=MPI`): pmix, or pmi2 on a
    cluster without PMIx (its MPI library must then support PMI-2)."""
    job_name = f"tf-recipes-{recipe}" if job_name is None else job_name
    check_sbatch_fields(time=time, job_name=job_name, partition=partition, account=account,
                        signal_grace=signal_grace)
    _check_request(launcher, nodes=nodes, gpus_per_node=gpus_per_node, sif=sif, container_image=container_image,
                   data_dir=data_dir, mpi=mpi)
    directives = _directives(launcher, job_name=job_name, nodes=nodes, gpus_per_node=gpus_per_node,
                             tasks_per_node=tasks_per_node, cpus_per_task=cpus_per_task, time=time,
                             signal_grace=signal_grace, partition=partition, account=account, requeue=requeue)
    on_host = not (sif or container_image)
    command = _srun_command(recipe, launcher, train_args, gpus_per_node=gpus_per_node, sif=sif,
                            container_image=container_image, data_dir=data_dir, mpi=mpi)
    lines = ["#!/bin/bash"] + [f"#SBATCH {d}" for d in directives] + [
        "",
        f"# {recipe} with --launcher {launcher} on {nodes} node(s) x {gpus_per_node} GPU(s).",
        *_submit_from(recipe, on_host),
        "set -euo pipefail",
        'cd "${SLURM_SUBMIT_DIR}"',
        *(_recipe_dir(recipe) if on_host else []),
        f'RESULTS="$PWD/results/{recipe}/slurm-${{SLURM_JOB_ID}}"',
        'mkdir -p "$RESULTS"',
        *_environment(launcher, gpus_per_node=gpus_per_node, cpus_per_task=cpus_per_task, mpi=mpi),
    ]
    if preflight:
        check = _srun_command(recipe, launcher, ["--deadline", str(preflight_deadline), "--run-id",
                                                 ShellWord('"$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}"')],
                              gpus_per_node=gpus_per_node, sif=sif, container_image=container_image,
                              data_dir=data_dir, mpi=mpi, module=PREFLIGHT_MODULE)
        lines += [
            "# Preflight: every task reports its host, devices and versions, one all-reduce is checked, and",
            f"# the job stops here (status 4, naming the tasks) if that fails within {preflight_deadline} s.",
            f"{check} || exit $?",
        ]
    lines += [
        "# --kill-on-bad-exit=1: when one task fails, srun ends the others instead of leaving them waiting.",
        "status=0",
        f"{command} || status=$?",
        *_on_stop(requeue),
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)
