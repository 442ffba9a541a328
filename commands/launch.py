"""Launcher commands: which processes start a recipe's train.py under each launcher.

The same argv runs on the host (`--runtime local`) and inside a container (docker, apptainer),
always from the repository root (in the images: /workspace/tf-recipes).
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

from commands.choices import HOROVOD_RUNNERS
from tf_recipes import contract
from tf_recipes.contract import LAUNCHERS, launcher_trait
from tf_recipes.operations import host_name_problem


class LaunchError(ValueError):
    """A launch request that cannot work; the message names the value and the valid choices."""


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    replicas: int = 1


def check_choice(kind: str, value: str, choices) -> None:
    if value not in choices:
        raise LaunchError(f"unknown {kind} {value!r}; choose one of: {', '.join(choices)}")


def parse_count(flag: str, text, minimum: int = 0) -> int:
    """A whole number >= minimum (0 unless told) from the command line, or a LaunchError naming the flag."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise LaunchError(f"{flag} {text!r} is not a whole number") from None
    if value < minimum:
        raise LaunchError(f"{flag} {value} must not be negative" if minimum == 0 else
                          f"{flag} {value} must be at least {minimum}")
    return value


def check_port_range(flag: str, first: int, count: int) -> None:
    """Ports first .. first+count-1 must all be TCP ports a process can listen on (1-65535)."""
    if not 1 <= first <= 65536 - count:
        raise LaunchError(f"{flag} {first} leaves no room for {count} worker port(s) on each node: give a port "
                          f"from 1024 to {65536 - count}")


def count_replicas(launcher: str, gpus: int, cpu_replicas: int) -> int:
    """Replicas in the job: one per GPU, or --cpu-replicas when there is no GPU."""
    if gpus < 0:
        raise LaunchError(f"--gpus {gpus} must be 0 (CPU only) or a number of GPUs")
    if cpu_replicas < 1:
        raise LaunchError(f"--cpu-replicas {cpu_replicas} must be at least 1")
    if gpus and cpu_replicas != 1:
        raise LaunchError(f"--cpu-replicas {cpu_replicas} applies only with --gpus 0; "
                          f"with --gpus {gpus} there is one replica per GPU")
    replicas = gpus or cpu_replicas
    if launcher_trait(launcher, "one_replica") and replicas != 1:
        raise LaunchError(f"--launcher {launcher} runs one replica, not {replicas}; use mirrored, "
                          "multiworker or horovod for more")
    return replicas


def build_launch(recipe: str, launcher: str, *, gpus: int = 0, cpu_replicas: int = 1,
                 train_args: list[str] = (), horovod_runner: str = "horovodrun",
                 python: str = "python", horovodrun: str = "horovodrun",
                 nsys_output: str | None = None, hosts=(), node_index: int = 0,
                 port_base: int = 23456, hostfile: str | None = None, hostfile_nodes: int = 0,
                 ssh_options=(), module: str | None = None, faults: bool = False) -> LaunchPlan:
    """The argv and environment that run `recipe` under `launcher` on one node.

    `hosts` (two or more) makes a job of several nodes without a scheduler: multiworker runs the
    returned command on every host, each with its `node_index`; horovod runs it once, on the first
    host, and reaches the others over ssh. Replicas are per node (`gpus` or `cpu_replicas`).

    `hostfile` (horovod only) names a file that lists the nodes instead, one `HOST slots=N` line per
    node, as the MPI Operator writes /etc/mpi/hostfile; `hostfile_nodes` says how many lines it has.
    `ssh_options` go to the ssh that mpirun starts remote ranks with (`-o StrictHostKeyChecking=no`);
    horovodrun has its own (it already skips host key checks).

    `nsys_output` (a folder) wraps every training process in Nsight Systems' `nsys profile`, one
    report per process (%p is its pid), inside whatever starts the processes.

    `module` (such as commands.choices.PREFLIGHT_MODULE) starts `python -m MODULE` in every process
    instead of the recipe's train.py, with the same launcher, processes and environment; `faults`
    starts train.py through `python -m tf_recipes.operations.faults`, which injects the TF_RECIPES_FAULT_* faults.
    """
    check_choice("launcher", launcher, LAUNCHERS)
    check_choice("horovod runner", horovod_runner, HOROVOD_RUNNERS)
    replicas = count_replicas(launcher, gpus, cpu_replicas)
    peers_from = launcher_trait(launcher, "peers_from")
    hosts = list(hosts)
    if len(hosts) > 1 and not launcher_trait(launcher, "multi_node"):
        raise LaunchError(f"--launcher {launcher} runs on one node; with --hosts use multiworker or horovod")
    for host in hosts:
        if host_name_problem(host):
            raise LaunchError(f"--hosts: {host_name_problem(host)}")
    if hosts and not 0 <= node_index < len(hosts):
        raise LaunchError(f"--node-index {node_index} is not a position in --hosts {','.join(hosts)}")
    if hostfile and (peers_from != "mpi" or hosts or hostfile_nodes < 1):
        raise LaunchError("a hostfile is for --launcher horovod without --hosts, with its node count")
    nodes = hostfile_nodes if hostfile else max(len(hosts), 1)
    if peers_from == "TF_CONFIG" and nodes > 1:
        check_port_range("--port-base", port_base, replicas)
    train = build_train_command(recipe, launcher, train_args, python=python, module=module, faults=faults)
    if nsys_output:
        train = ["nsys", "profile", "--trace=cuda,cudnn,cublas,nvtx,osrt", "--force-overwrite=true",
                 "--output", f"{nsys_output}/nsys-{launcher}-%p", *train]
    # single and mirrored: one process uses every GPU; multiworker and horovod: one GPU per process.
    env = launch_environment(gpus, gpus if launcher_trait(launcher, "gpus_per_process") == "all" else min(gpus, 1))

    # One branch per way of starting the processes: one process (single, mirrored), tf_recipes.operations.spawn's
    # workers with TF_CONFIG (multiworker), or MPI ranks through horovodrun or mpirun (horovod).
    if launcher_trait(launcher, "one_process"):
        # A strategy in one process; on CPUs it is told how many replicas (logical devices) to make.
        argv = train + ([] if gpus or launcher_trait(launcher, "one_replica") else ["--cpu-replicas", str(replicas)])
    elif peers_from == "TF_CONFIG":
        argv = [python, "-m", "tf_recipes.operations.spawn", "--nproc", str(replicas)]
        argv += ["--gpus-per-worker", "1"] if gpus else []
        if nodes > 1:
            argv += ["--hosts", ",".join(hosts), "--node-index", str(node_index), "--port-base", str(port_base)]
        argv += ["--", *train]
    elif horovod_runner == "horovodrun":
        argv = [horovodrun, "-np", str(replicas * nodes)]
        if hostfile:
            argv += ["--hostfile", hostfile]
        else:
            argv += ["-H", ",".join(f"{host}:{replicas}" for host in hosts or ["localhost"])]
        argv += [] if gpus else ["--gloo"]  # CPU: Gloo needs no MPI install
        argv += train
    else:
        argv = ["mpirun", "-np", str(replicas * nodes), "--bind-to", "none", "--map-by", "slot"]
        if hostfile:
            argv += ["--hostfile", hostfile]
        elif nodes > 1:
            argv += ["-H", ",".join(f"{host}:{replicas}" for host in hosts)]
        if ssh_options:
            argv += ["--mca", "plm_rsh_args", " ".join(ssh_options)]
        for name in sorted(env) + ["PATH", "LD_LIBRARY_PATH", "PYTHONPATH"]:
            argv += ["-x", name]  # mpirun passes only the variables it is told to
        argv += train
    return LaunchPlan(argv=argv, env=env, replicas=replicas * nodes)


class ShellWord(str):
    """A word written for a shell script as it stands, such as "$RESULTS"; `shell_join` quotes the rest."""


def shell_join(argv) -> str:
    return " ".join(word if isinstance(word, ShellWord) else shlex.quote(word) for word in argv)


def echo_line(argv, env=None) -> str:
    """How a command is shown before it runs: `+ NAME=value ... argv`, quoted for the shell."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return f"+ {prefix + ' ' if prefix else ''}{shlex.join(argv)}"


def build_train_command(recipe: str, launcher: str, train_args=(), python: str = "python",
                        module: str | None = None, faults: bool = False) -> list[str]:
    """One training process: what every launcher, scheduler task (srun) and pod finally runs
    (`python -m MODULE` instead of the recipe's train.py when `module` is given; train.py through
    `python -m tf_recipes.operations.faults` with `faults`)."""
    check_choice("launcher", launcher, LAUNCHERS)
    program = ["-m", module] if module else [f"recipes/{recipe}/train.py"]
    if faults and not module:
        program = ["-m", "tf_recipes.operations.faults", *program]
    return [python, *program, "--launcher", launcher, *train_args]


def launch_environment(gpus: int, gpus_per_process: int | None = None) -> dict[str, str]:
    """The environment every launcher adds. No GPU asked for: hide any that exist, so that --gpus 0
    means the same run everywhere. GPUS_PER_PROCESS_ENV (default: `gpus`, one process) is what each
    training process checks TensorFlow's GPUs against before it builds anything."""
    per_process = gpus if gpus_per_process is None else gpus_per_process
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)), "TF_CPP_MIN_LOG_LEVEL": "1",
            contract.GPUS_PER_PROCESS_ENV: str(per_process)}


def container_name(recipe: str, results_dir: str, suffix: str = "") -> str:
    """`tf-recipes-RECIPE-RUN[-SUFFIX]` (RUN: the results folder's name), what `docker stop` takes;
    only the characters Docker allows in names. A suffix (the caller's pid) keeps two runs with
    results folders of the same name apart."""
    run = re.sub(r"[^a-zA-Z0-9_.-]+", "-", os.path.basename(os.path.normpath(results_dir))).strip("-.")
    return "-".join(part for part in ("tf-recipes", recipe, run, suffix) if part)


def run_dir_name(recipe: str, launcher: str, stamp: str) -> str:
    """results/RECIPE/STAMP-LAUNCHER: one folder per run, sortable by time."""
    return os.path.join("results", recipe, f"{stamp}-{launcher}")
