"""`invoke run`: train a recipe under a launcher, on this machine or in its container."""
from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass

from invoke import Exit, task

from commands import choices, containers, launch
from tf_recipes import contract, user_paths
from tf_recipes.contract import launcher_trait
from tf_recipes.operations import spawn
from tf_recipes.operations.faults import FAULT_ENVS
from tasks import host

RUNTIMES = ("auto", *choices.RUNTIMES)


def _runtime(runtime: str, docker: str) -> str:
    if runtime != "auto":
        return runtime
    runtime = "docker" if host.docker_engine_answers(docker) else "local"
    print(f"runtime: {runtime} ({'a Docker engine answers' if runtime == 'docker' else 'no Docker engine answers'})")
    return runtime


def _check_request(runtime, base, gpus, launcher, host_list, train_args, data_dir, nsys, dry) -> None:
    """One line for every combination that cannot work, before anything starts."""
    if data_dir and not os.path.isdir(data_dir):
        if not dry:
            host.fail(f"--data-dir {data_dir} is not a folder")
        print(f"note: --data-dir {data_dir} is not a folder on this machine", file=sys.stderr)
    if runtime != "local":
        for flag in ("--data-dir", "--results-dir"):
            if any(arg == flag or arg.startswith(flag + "=") for arg in train_args):
                host.fail(f"give {flag} to invoke run (before --), not to train.py: in a container it is "
                          f"mounted and the script sees it at /{flag[2:].split('-')[0]}")
    if nsys and runtime == "local" and not shutil.which("nsys") and not dry:
        host.fail("--nsys needs Nsight Systems (`nsys`) on PATH; it ships in the NGC image "
                  "(--runtime docker --base ngc)")
    if nsys and runtime != "local" and base == "cpu":
        host.fail("--nsys needs Nsight Systems, which only the NGC image has; use --base ngc")
    if len(host_list) > 1 and launcher_trait(launcher, "peers_from") == "mpi" and runtime != "local":
        host.fail("horovod across hosts starts its ranks over ssh, and invoke run starts no sshd with a shared key "
                  "in the other hosts' containers; use --launcher multiworker with --hosts, SLURM (`invoke sbatch`), "
                  "Kubernetes (`invoke k8s RECIPE --kind mpijob`, which sets that up) or --runtime local")


def _check_results_dir(results_dir: str, data_dir: str | None, dry: bool) -> None:
    """--results-dir must be a folder (or nothing yet), and neither the data folder, nor in it, nor around it; and
    one that can be made (with --dry a note: the run may be meant for another machine, as for --data-dir)."""
    problem = user_paths.flags_problem({"--data-dir": data_dir}, {"--results-dir": results_dir}, creatable=False)
    if problem:
        host.fail(problem)
    host.check_creatable("--results-dir", results_dir, dry)


def _stack(stack: str, runtime: str, launcher: str) -> str:
    """The stack the job runs on, checked against the launcher: the installed one with --runtime local."""
    launch.check_choice("launcher", launcher, contract.LAUNCHERS)
    if runtime == "local":
        here = host.installed_stack()
        if stack not in ("auto", here):
            host.check_stack(stack)
            host.fail(f"--stack {stack}: this Python's TensorFlow is the {here} stack; run the invoke of a venv made "
                      f"with `bash ci/setup.sh --stack {stack} --venv .venv-{stack}`, "
                      "or a container (--runtime docker)")
        stack = here
    elif stack == "auto":
        stack = contract.DEFAULT_STACK
    host.check_stack(stack)
    if launcher not in contract.STACK_LAUNCHERS[stack]:
        supported = [name for name in contract.STACKS if launcher in contract.STACK_LAUNCHERS[name]]
        host.fail(f"--launcher {launcher} does not run on the {stack} stack (its launchers: "
                  f"{', '.join(contract.STACK_LAUNCHERS[stack])}): Horovod 0.28.1 builds only against TensorFlow "
                  f"2.17; use --stack {supported[0]} (--runtime local: `bash ci/setup.sh --stack {supported[0]} "
                  "--horovod`), or --launcher multiworker")
    return stack


def asked_faults() -> dict:
    """The TF_RECIPES_FAULT_* variables invoke's environment sets: train.py then starts through
    `python -m tf_recipes.operations.faults`, which injects them (the tests' and the nightly's control cells)."""
    return {name: os.environ[name] for name in FAULT_ENVS if os.environ.get(name)}


def _in_runtime(c, plan, *, recipe, runtime, stack, base, image, gpus, data_dir, results_dir, nsys, multi_host,
                docker, dry):
    """(argv, env) that start the launch plan in its runtime. The faults a test asks for
    (tf_recipes.operations.faults' TF_RECIPES_FAULT_* variables, in invoke's environment) reach the processes: a local
    run inherits them, a container is given them."""
    env = dict(plan.env)
    cfg = host.settings(c)
    if runtime == "local":
        return plan.argv, {**env, "PYTHONPATH": host.ROOT}
    faults = asked_faults()
    if runtime == "docker":
        image = image or host.image_tag(c, recipe, base, stack)
        if not dry:
            host.require_image(docker, image, {image: f"invoke build {recipe} --stack {stack} --base {base}"})
        return containers.build_docker_run_command(
            image, plan.argv, gpus=gpus, env=env, forward_env=sorted(faults), data_dir=data_dir,
            results_dir=results_dir, user=f"{os.getuid()}:{os.getgid()}", profile=nsys,
            network="host" if multi_host else None,  # workers on other hosts reach these ports
            memlock=int(cfg["memlock"]) if str(cfg["memlock"]) else None,
            name=launch.container_name(recipe, results_dir, str(os.getpid())), docker=docker), {}
    sif = image or host.sif_path(c, recipe, base, stack)
    if not dry:
        if not shutil.which(cfg["apptainer"]):
            host.fail(f"{cfg['apptainer']} is not installed or not on PATH: install Apptainer (on Debian 12, as root: "
                      "bash ci/apptainer.sh)")
        if not os.path.isfile(os.path.join(host.ROOT, sif)):  # relative to the repository, where it runs
            host.fail(f"SIF {sif} is not built; run `invoke build {recipe} --stack {stack} --base {base} "
                      "--runtime apptainer` first")
    if gpus:
        env.pop("CUDA_VISIBLE_DEVICES")  # apptainer exec sets it from --gpus
    return containers.build_apptainer_exec_command(
        sif, plan.argv, gpus=gpus, env={**env, **faults}, data_dir=data_dir, results_dir=results_dir,
        apptainer=cfg["apptainer"]), {}


@dataclass(frozen=True)
class Job:
    """What `invoke run` (and `invoke preflight`) start: the command and environment in its runtime."""
    argv: list
    env: dict
    results_dir: str
    launcher: str
    runtime: str


def prepare_job(c, recipe, task_name, program_args, *, gpus, cpu_replicas, launcher, runtime, horovod_runner, base,
                image, data_dir, results_dir, hosts, node_index, port_base, stack="auto", nsys=False, dry=False,
                module=None):
    """The launch plan of `invoke run` in its runtime, checked; `module` (with its `program_args`)
    instead of the recipe's train.py for `invoke preflight`. One line and exit 2 for a bad request."""
    try:
        host.check_recipe(recipe, task_name)
        launch.check_choice("runtime", runtime, RUNTIMES)
        gpus, cpu_replicas = launch.parse_count("--gpus", gpus), launch.parse_count("--cpu-replicas", cpu_replicas)
        launcher = launcher or ("single" if (gpus or cpu_replicas) == 1 else "mirrored")
        train_args = list(program_args)
        docker = host.docker_client(c)
        runtime = _runtime(runtime, docker)
        stack = _stack(stack, runtime, launcher)
        base = base or ("cpu" if gpus == 0 else choices.STACK_BASES[stack][0])
        if runtime != "local":
            host.check_stack(stack, base)
        given_results_dir = results_dir
        results_dir = os.path.abspath(results_dir or os.path.join(host.ROOT, launch.run_dir_name(
            recipe, f"{task_name}-{launcher}" if module else launcher, host.stamp())))
        host_list = [name for name in (hosts or "").split(",") if name]
        _check_request(runtime, base, gpus, launcher, host_list, train_args, data_dir, nsys, dry)
        _check_results_dir(given_results_dir or results_dir, data_dir, dry)
        data_dir = os.path.abspath(data_dir) if data_dir else None
        inside = runtime != "local"
        train_args += ["--results-dir", containers.CONTAINER_RESULTS_DIR if inside else results_dir]
        if data_dir:
            train_args += ["--data-dir", containers.CONTAINER_DATA_DIR if inside else data_dir]
        plan = launch.build_launch(recipe, launcher, gpus=gpus, cpu_replicas=cpu_replicas,
                                   hosts=host_list, node_index=launch.parse_count("--node-index", node_index),
                                   port_base=launch.parse_count("--port-base", port_base),
                                   train_args=train_args, horovod_runner=horovod_runner,
                                   nsys_output=(containers.CONTAINER_RESULTS_DIR if inside else results_dir)
                                   if nsys else None,
                                   python=sys.executable if runtime == "local" else "python",
                                   horovodrun=host.local_horovodrun() if runtime == "local" else "horovodrun",
                                   module=module, faults=bool(asked_faults()))
        argv, env = _in_runtime(c, plan, recipe=recipe, runtime=runtime, stack=stack, base=base, image=image,
                                gpus=gpus, data_dir=data_dir, results_dir=results_dir, nsys=nsys,
                                multi_host=len(host_list) > 1, docker=docker, dry=dry)
    except ValueError as error:  # a LaunchError, or a value a container builder cannot put into its syntax
        host.fail(str(error))
    return Job(argv, env, results_dir, launcher, runtime)


# The flags `invoke run` shares with `invoke preflight` (which takes the same launch settings).
LAUNCH_HELP = {
    "gpus": "GPUs to use; 0 runs on the CPU",
    "cpu-replicas": "with --gpus 0: replicas on the CPU (processes or logical devices)",
    "launcher": "single | mirrored | multiworker | horovod (default: single for 1 replica, else mirrored)",
    "runtime": "local | docker | apptainer | auto (docker when an engine answers, else local)",
    "horovod-runner": "horovodrun | mpirun: what starts the Horovod processes",
    "stack": "ngc-25.02 (TF 2.17, every launcher) | current (the newest TF; no horovod) | auto (with --runtime "
             "local the installed one, else ngc-25.02)",
    "base": "image variant to run: ngc (ngc-25.02) | gpu (current) | cpu (default: cpu with --gpus 0, else the "
            "stack's GPU base)",
    "image": "run this image instead of tf-recipes/RECIPE:BASE",
    "hosts": "several nodes without a scheduler: comma-separated hosts (multiworker: run on each with "
             "--node-index; horovod: run on the first)",
    "node-index": "with --hosts and multiworker: this node's position in --hosts",
    "port-base": "with --hosts and multiworker: first worker port, the same on every node",
    "dry": "print the commands and environment, run nothing",
}


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        **LAUNCH_HELP,
        "recipe": "recipe folder name under recipes/",
        "data-dir": "dataset folder on this machine (mounted read-only at /data in containers)",
        "results-dir": "where results.json and checkpoints go (default: results/RECIPE/TIME-LAUNCHER)",
        "nsys": "profile every training process with Nsight Systems (NGC image or a host with nsys)",
    },
)
def run(c, recipe, gpus="0", cpu_replicas="1", launcher=None, runtime="auto", horovod_runner="horovodrun",
        stack="auto", base=None, image=None, data_dir=None, results_dir=None, hosts=None, node_index="0",
        port_base="23456", nsys=False, dry=False):
    """Train RECIPE under a launcher; arguments after -- go to its train.py (see its --help)."""
    job = prepare_job(c, recipe, "run", shlex.split(c.remainder or ""), gpus=gpus, cpu_replicas=cpu_replicas,
                      launcher=launcher, runtime=runtime, horovod_runner=horovod_runner, base=base, image=image,
                      data_dir=data_dir, results_dir=results_dir, hosts=hosts, node_index=node_index,
                      port_base=port_base, stack=stack, nsys=nsys, dry=dry)
    argv, env, results_dir, launcher, runtime = job.argv, job.env, job.results_dir, job.launcher, job.runtime
    if not dry:
        host.make_folder("--results-dir", results_dir)  # made by the caller, so it is the caller's
    started = time.time()
    # A killed docker client leaves its container running: the container this run named goes with it.
    leftover = [argv[0], "rm", "-f", argv[argv.index("--name") + 1]] if runtime == "docker" else None
    code = spawn.job_status(host.execute(argv, env, dry, leftover=leftover), results_dir, started)
    if code == contract.EXIT_STOPPED:
        raise Exit(f"{recipe} ({launcher}, {runtime}) stopped on a signal with a checkpoint (status {code}); "
                   f"continue it with the same command plus --results-dir {results_dir} and, after --, --resume",
                   code=code)
    if code:
        raise Exit(f"{recipe} ({launcher}, {runtime}) failed with status {code}", code=code)
    if not dry and runtime != "local":  # train.py printed the path inside the container
        print(f"results on this machine: {os.path.join(results_dir, contract.RESULTS_FILE)}")
