"""invoke tasks: build the recipe images and run the recipes, on this machine or in a container.

    invoke run mnist-cnn --gpus 0 --cpu-replicas 2 --launcher multiworker -- --synthetic --max-steps 20
    invoke run cityscapes-unet --gpus 8
    invoke build mnist-cnn --base cpu
    invoke images.bootstrap && invoke images.cpu

Every command is built by a pure function in `commands/` and printed before it runs; `--dry` prints
it and stops. Defaults live in the `tf_recipes` configuration below and can be overridden in
invoke.yaml or with INVOKE_TF_RECIPES_* environment variables.
"""
from __future__ import annotations

import datetime
import os
import shlex
import shutil
import subprocess
import sys
import time

from invoke import Collection, Exit, task

from commands import containers, k8s, launch, launch_files, slurm
from common import stopping

ROOT = os.path.dirname(os.path.abspath(__file__))
BASES = ("ngc", "cpu")
RUNTIMES = ("auto", "local", "docker", "apptainer")
DEFAULTS = {
    "image_prefix": "tf-recipes",
    "ngc_base": "nvcr.io/nvidia/tensorflow:25.02-tf2-py3",
    "cpu_base": "tf-recipes/cpu-base:latest",
    "debian_base": "tf-recipes/debian:bookworm",
    "docker": "auto",  # a docker client path, or auto: the first that can build with BuildKit
    # `docker run --ulimit memlock=-1` as NVIDIA recommends; "" leaves the limit alone (for hosts
    # and sandboxes that refuse to raise it: "error setting rlimit type 8").
    "memlock": "-1",
    "apptainer": "apptainer",
    "sif_dir": "build/sif",
}


def settings(c) -> dict:
    return {**DEFAULTS, **c.config.get("tf_recipes", {})}


def fail(message: str):
    """A user mistake: one line on stderr and exit status 2, no traceback."""
    raise Exit(f"error: {message}", code=2)


def show(argv, env=None) -> None:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    print(f"+ {prefix + ' ' if prefix else ''}{shlex.join(argv)}", flush=True)


def execute(argv, env=None, dry=False) -> int:
    """Print the command, then (unless dry) run it with the terminal attached and return its status."""
    show(argv, env)
    if dry:
        return 0
    try:
        process = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})})
    except FileNotFoundError:
        fail(f"{argv[0]} is not installed or not on PATH")
    # SIGTERM/SIGUSR1 to invoke (a scheduler stopping the job) go on to the job, which checkpoints.
    with stopping.forwarding_stop_signals([process]):
        try:
            return process.wait()
        except KeyboardInterrupt:  # Ctrl-C reached the job too (same process group): let it end
            try:
                return process.wait(timeout=30)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):  # a second Ctrl-C, or it hangs
                process.kill()
                return process.wait()


def write_or_print(text: str, out: str | None, dry: bool, next_step: str) -> None:
    """A rendered file: written to `out` (unless dry), else printed."""
    if out and not dry:
        with open(out, "w") as handle:
            handle.write(text)
        print(f"wrote {out}; {next_step}")
    else:
        print(text, end="")


def check_recipe(recipe: str) -> None:
    launch.check_choice("recipe", recipe, launch.list_recipes(ROOT))


def docker_client(c) -> str:
    """The configured docker client, or the first one on this machine that builds with BuildKit.

    `docker build --secret` and `RUN --mount` need BuildKit: the buildx plugin, or a client with
    BuildKit built in (Debian's docker.io 20.10 with DOCKER_BUILDKIT=1). A newer client without
    buildx falls back to the legacy builder, which cannot build these Dockerfiles.
    """
    configured = settings(c)["docker"]
    if configured != "auto":
        return configured
    candidates = [path for path in (shutil.which("docker"), "/usr/bin/docker") if path and os.path.exists(path)]
    for client in candidates:
        probe = subprocess.run([client, "build", "--help"], capture_output=True, text=True,
                               env={**os.environ, "DOCKER_BUILDKIT": "1"})
        if "--secret" in probe.stdout:
            return client
    return candidates[0] if candidates else "docker"


def docker_engine_answers(docker: str) -> bool:
    if not shutil.which(docker):
        return False
    return subprocess.call([docker, "info"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def local_horovodrun() -> str:
    """The horovodrun installed next to this Python (the venv's), else whichever is on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    return beside if os.path.exists(beside) else "horovodrun"


def image_tag(c, recipe: str, base: str) -> str:
    return f"{settings(c)['image_prefix']}/{recipe}:{base}"


def git_revision() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def ca_bundle_from(explicit: str | None) -> str | None:
    """The site CA bundle for pip in builds: --ca-bundle, else SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT."""
    for candidate in (explicit, os.environ.get("SSL_CERT_FILE"), os.environ.get("REQUESTS_CA_BUNDLE"),
                      os.environ.get("PIP_CERT")):
        if candidate:
            if not os.path.isfile(candidate):
                fail(f"CA bundle {candidate} does not exist; pass --ca-bundle PATH or unset the variable")
            return os.path.abspath(candidate)
    return None


# -- run ------------------------------------------------------------------------------------------

@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "gpus": "GPUs to use; 0 runs on the CPU",
        "cpu-replicas": "with --gpus 0: replicas on the CPU (processes or logical devices)",
        "launcher": "single | mirrored | multiworker | horovod (default: single for 1 replica, else mirrored)",
        "runtime": "local | docker | apptainer | auto (docker when an engine answers, else local)",
        "horovod-runner": "horovodrun | mpirun: what starts the Horovod processes",
        "base": "image variant to run: ngc | cpu (default: cpu with --gpus 0, else ngc)",
        "image": "run this image instead of tf-recipes/RECIPE:BASE",
        "data-dir": "dataset folder on this machine (mounted read-only at /data in containers)",
        "results-dir": "where results.json and checkpoints go (default: results/RECIPE/TIME-LAUNCHER)",
        "hosts": "several nodes without a scheduler: comma-separated hosts (multiworker: run on each with --node-index; horovod: run on the first)",
        "node-index": "with --hosts and multiworker: this node's position in --hosts",
        "port-base": "with --hosts and multiworker: first worker port, the same on every node",
        "nsys": "profile every training process with Nsight Systems (NGC image or a host with nsys)",
        "dry": "print the commands and environment, run nothing",
    },
)
def run(c, recipe, gpus="0", cpu_replicas="1", launcher=None, runtime="auto", horovod_runner="horovodrun",
        base=None, image=None, data_dir=None, results_dir=None, hosts=None, node_index="0", port_base="23456",
        nsys=False, dry=False):
    """Train RECIPE under a launcher; arguments after -- go to its train.py (see its --help)."""
    try:
        check_recipe(recipe)
        launch.check_choice("runtime", runtime, RUNTIMES)
        gpus, cpu_replicas = launch.parse_count("--gpus", gpus), launch.parse_count("--cpu-replicas", cpu_replicas)
        launcher = launcher or ("single" if (gpus or cpu_replicas) == 1 else "mirrored")
        train_args = shlex.split(c.remainder or "")
        cfg = settings(c)
        docker = docker_client(c)
        if runtime == "auto":
            runtime = "docker" if docker_engine_answers(docker) else "local"
            print(f"runtime: {runtime} ({'a Docker engine answers' if runtime == 'docker' else 'no Docker engine answers'})")
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        results_dir = os.path.abspath(results_dir or os.path.join(ROOT, launch.run_dir_name(recipe, launcher, stamp)))
        if data_dir and not os.path.isdir(data_dir):
            if not dry:
                fail(f"--data-dir {data_dir} is not a folder")
            print(f"note: --data-dir {data_dir} is not a folder on this machine", file=sys.stderr)
        data_dir = os.path.abspath(data_dir) if data_dir else None
        inside = runtime != "local"
        for flag in ("--data-dir", "--results-dir"):
            if inside and any(arg == flag or arg.startswith(flag + "=") for arg in train_args):
                fail(f"give {flag} to invoke run (before --), not to train.py: in a container it is "
                     f"mounted and the script sees it at /{flag[2:].split('-')[0]}")
        train_args += ["--results-dir", containers.CONTAINER_RESULTS_DIR if inside else results_dir]
        if data_dir:
            train_args += ["--data-dir", containers.CONTAINER_DATA_DIR if inside else data_dir]
        if nsys and runtime == "local" and not shutil.which("nsys") and not dry:
            fail("--nsys needs Nsight Systems (`nsys`) on PATH; it ships in the NGC image (--runtime docker --base ngc)")
        if nsys and runtime != "local" and (base or ("cpu" if gpus == 0 else "ngc")) == "cpu":
            fail("--nsys needs Nsight Systems, which only the NGC image has; use --base ngc")
        host_list = [host for host in (hosts or "").split(",") if host]
        if len(host_list) > 1 and launcher == "horovod" and runtime != "local":
            fail("horovod across hosts starts its ranks over ssh, and invoke run starts no sshd with a shared key "
                 "in the other hosts' containers; use --launcher multiworker with --hosts, SLURM (`invoke sbatch`), "
                 "Kubernetes (`invoke k8s RECIPE --kind mpijob`, which sets that up) or --runtime local")
        plan = launch.build_launch(recipe, launcher, gpus=gpus, cpu_replicas=cpu_replicas,
                                   hosts=host_list, node_index=launch.parse_count("--node-index", node_index),
                                   port_base=launch.parse_count("--port-base", port_base),
                                   train_args=train_args, horovod_runner=horovod_runner,
                                   nsys_output=(containers.CONTAINER_RESULTS_DIR if inside else results_dir) if nsys else None,
                                   python=sys.executable if runtime == "local" else "python",
                                   horovodrun=local_horovodrun() if runtime == "local" else "horovodrun")
    except launch.LaunchError as error:
        fail(str(error))

    base = base or ("cpu" if gpus == 0 else "ngc")
    env = dict(plan.env)
    if runtime == "local":
        argv = plan.argv
        env["PYTHONPATH"] = ROOT
    elif runtime == "docker":
        image = image or image_tag(c, recipe, base)
        if not dry and subprocess.call([docker, "image", "inspect", image], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) != 0:
            fail(f"image {image} is not built; run `invoke build {recipe} --base {base}` first")
        argv = containers.build_docker_run_command(
            image, plan.argv, gpus=gpus, env=env, data_dir=data_dir, results_dir=results_dir,
            user=f"{os.getuid()}:{os.getgid()}", profile=nsys,
            network="host" if len(host_list) > 1 else None,  # workers on other hosts reach these ports
            memlock=int(cfg["memlock"]) if str(cfg["memlock"]) else None,
            name=launch.container_name(recipe, results_dir, str(os.getpid())), docker=docker)
        env = {}
    else:
        sif = image or os.path.join(cfg["sif_dir"], f"{recipe}_{base}.sif")
        if gpus:
            env.pop("CUDA_VISIBLE_DEVICES")  # apptainer exec sets it from --gpus
        argv = containers.build_apptainer_exec_command(
            sif, plan.argv, gpus=gpus, env=env, data_dir=data_dir, results_dir=results_dir,
            apptainer=cfg["apptainer"])
        env = {}
    if not dry:
        os.makedirs(results_dir, exist_ok=True)  # made by the caller, so it is the caller's
    started = time.time()
    code = stopping.job_status(execute(argv, env, dry), results_dir, started)
    if code == stopping.STOP_EXIT_STATUS:
        raise Exit(f"{recipe} ({launcher}, {runtime}) stopped on a signal with a checkpoint (status {code}); "
                   f"continue it with the same command plus --results-dir {results_dir} and, after --, --resume",
                   code=code)
    if code:
        raise Exit(f"{recipe} ({launcher}, {runtime}) failed with status {code}", code=code)
    if not dry and runtime != "local":  # train.py printed the path inside the container
        print(f"results on this machine: {os.path.join(results_dir, 'results.json')}")


# -- build ----------------------------------------------------------------------------------------

@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "base": "ngc (NVIDIA's TensorFlow 25.02 image) | cpu (images/cpu, built locally)",
        "runtime": "docker | apptainer (a .sif from the Docker image)",
        "ca-bundle": "CA bundle for pip behind a TLS proxy (default: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT)",
        "dry": "print the commands, run nothing",
    },
)
def build(c, recipe, base="ngc", runtime="docker", ca_bundle=None, dry=False):
    """Build the image of RECIPE on the NGC or the CPU base image."""
    try:
        check_recipe(recipe)
        launch.check_choice("base", base, BASES)
        launch.check_choice("runtime", runtime, ("docker", "apptainer"))
    except launch.LaunchError as error:
        fail(str(error))
    cfg = settings(c)
    tag = image_tag(c, recipe, base)
    if runtime == "apptainer":
        sif = os.path.join(cfg["sif_dir"], f"{recipe}_{base}.sif")
        if not dry:
            os.makedirs(cfg["sif_dir"], exist_ok=True)
        code = execute(containers.build_apptainer_build_command(sif, tag, apptainer=cfg["apptainer"]), dry=dry)
    else:
        base_image = cfg["ngc_base"] if base == "ngc" else cfg["cpu_base"]
        argv, env = containers.build_docker_build_command(
            f"recipes/{recipe}/Dockerfile", ".", tag,
            build_args={"BASE_IMAGE": base_image, "GIT_REVISION": git_revision()},
            labels={}, ca_bundle=ca_bundle_from(ca_bundle), docker=docker_client(c))
        code = execute(argv, env, dry)
    if code:
        raise Exit(f"building {tag} failed with status {code}", code=code)


# -- slurm ----------------------------------------------------------------------------------------

@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "launcher": "multiworker | horovod (any node count) | mirrored | single (one node)",
        "nodes": "nodes to allocate",
        "gpus-per-node": "GPUs per node; one task per GPU for multiworker and horovod",
        "tasks-per-node": "with --gpus-per-node 0: worker processes per node",
        "cpus-per-task": "CPU cores per task",
        "sif": "run every task in this Apptainer image (see `invoke build RECIPE --runtime apptainer`)",
        "container-image": "run every task in this image through Pyxis/Enroot (srun --container-image)",
        "data-dir": "dataset folder on the cluster's shared file system",
        "time": "wall-clock limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS",
        "partition": "SLURM partition", "account": "SLURM account",
        "job-name": "job name (default tf-recipes-RECIPE)",
        "signal-grace": "seconds before the time limit at which the tasks get SIGUSR1 and checkpoint",
        "requeue": "when the job stops on a signal with a checkpoint, requeue it; it resumes by itself",
        "out": "write the script here instead of printing it",
        "dry": "print the script even when --out is given; write nothing",
    },
)
def sbatch(c, recipe, launcher="horovod", nodes="1", gpus_per_node="8", tasks_per_node="1", cpus_per_task="8",
           sif=None, container_image=None, data_dir=None, time="01:00:00", partition=None, account=None,
           job_name=None, signal_grace=str(slurm.DEFAULT_SIGNAL_GRACE), requeue=False, out=None, dry=False):
    """Render an sbatch script that runs RECIPE on a SLURM cluster; arguments after -- go to train.py."""
    try:
        check_recipe(recipe)
        text = slurm.render_sbatch(
            recipe, launcher, nodes=launch.parse_count("--nodes", nodes),
            gpus_per_node=launch.parse_count("--gpus-per-node", gpus_per_node),
            train_args=shlex.split(c.remainder or ""), sif=sif, container_image=container_image,
            data_dir=data_dir, time=time, partition=partition, account=account, job_name=job_name,
            tasks_per_node=launch.parse_count("--tasks-per-node", tasks_per_node),
            cpus_per_task=launch.parse_count("--cpus-per-task", cpus_per_task),
            signal_grace=launch.parse_count("--signal-grace", signal_grace), requeue=requeue)
    except launch.LaunchError as error:
        fail(str(error))
    write_or_print(text, out, dry, f"submit with: sbatch {out}")


# -- kubernetes -----------------------------------------------------------------------------------

@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "launcher": "horovod (default) | multiworker",
        "kind": "mpijob (MPI Operator; horovod) | tfjob (Training Operator v1) | job (Indexed Job, no operator)",
        "workers": "pods (MPI workers, TF workers)",
        "gpus-per-worker": "GPUs of each pod; 0 runs on CPUs",
        "image": "image the pods run (default tf-recipes/RECIPE:ngc; push it to a registry the cluster reaches)",
        "data": "dataset volume: a PersistentVolumeClaim name or an absolute host path (mounted read-only at /data)",
        "results": "results volume, shared by all pods: a PersistentVolumeClaim name or an absolute host path",
        "namespace": "namespace of every object (default: kubectl's current one)",
        "name": "job name (default RECIPE-LAUNCHER); results go to /results/NAME",
        "horovod-runner": "with mpijob: mpirun (default) | horovodrun",
        "grace-period": "seconds between SIGTERM and SIGKILL: time to stop at a step and checkpoint",
        "out": "write the manifests here instead of printing them",
        "dry": "print the manifests even when --out is given; write nothing",
    },
)
def k8s_manifests(c, recipe, launcher=None, kind=None, workers="2", gpus_per_worker="8", image=None, data=None,
                  results="tf-recipes-results", namespace=None, name=None, horovod_runner="mpirun",
                  grace_period=str(k8s.GRACE_PERIOD), out=None, dry=False):
    """Render Kubernetes manifests that run RECIPE; arguments after -- go to train.py."""
    try:
        check_recipe(recipe)
        documents = k8s.build_manifests(
            recipe, launcher=launcher, kind=kind, workers=launch.parse_count("--workers", workers),
            gpus_per_worker=launch.parse_count("--gpus-per-worker", gpus_per_worker),
            image=image or image_tag(c, recipe, "ngc"), data=data, results=results, namespace=namespace,
            name=name, train_args=shlex.split(c.remainder or ""), horovod_runner=horovod_runner,
            grace_period=launch.parse_count("--grace-period", grace_period))
    except launch.LaunchError as error:
        fail(str(error))
    text = k8s.render_yaml(documents)
    write_or_print(text, out, dry, f"apply with: kubectl apply -f {out}")


@task(
    help={"recipe": "only this recipe (default: every recipe)",
          "check": "write nothing; list the files that are stale and fail if any is",
          "dry": "list the files that would be written, write nothing"},
)
def launch_files_task(c, recipe=None, check=False, dry=False):
    """Write every recipe's launch/ folder: SLURM scripts, Kubernetes manifests, the docker command."""
    recipes = launch.list_recipes(ROOT)
    if recipe:
        try:
            check_recipe(recipe)
        except launch.LaunchError as error:
            fail(str(error))
        recipes = [recipe]
    if check:
        stale = launch_files.stale_files(ROOT, recipes)
        for path in stale:
            print(f"stale: {path}")
        if stale:
            raise Exit("launch files are out of date; run `invoke launch-files`", code=1)
        print(f"launch files of {', '.join(recipes)} are up to date")
        return
    for name in recipes:
        folder = os.path.join(ROOT, "recipes", name, launch_files.FOLDER)
        files = launch_files.launch_files(name)
        if not dry:
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
        for filename, text in files.items():
            path = os.path.join(folder, filename)
            print(f"{'would write' if dry else 'wrote'} {os.path.relpath(path, ROOT)}")
            if not dry:
                with open(path, "w") as handle:
                    handle.write(text)
                if filename.endswith((".sh", ".sbatch")):
                    os.chmod(path, 0o755)


# -- bench ----------------------------------------------------------------------------------------

@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "replicas": "replica counts to measure, comma-separated (default 1,2,4 on the CPU; 1,2,4,8 up to --gpus)",
        "launchers": "launchers to measure, comma-separated (single runs only at 1 replica)",
        "rounds": "interleaved rounds; the median of the rounds is reported",
        "gpus": "GPUs on this machine; 0 measures CPU replicas (--cpu-replicas)",
        "out": "folder for bench.md, bench.json and bench.png (default results/bench/RECIPE-TIME)",
        "input-benchmark": "also run the recipe's benchmark_input.py and compare its rates with training",
        "input-args": "arguments for benchmark_input.py (quoted), besides the --json it always gets",
        "keep-runs": "keep every run's results folder and log under OUT/runs",
        "dry": "print the commands, run nothing",
    },
)
def bench(c, recipe, replicas=None, launchers=",".join(launch.LAUNCHERS), rounds="3", gpus="0", out=None,
          input_benchmark=True, input_args="", keep_runs=False, dry=False):
    """Measure RECIPE's images/s under every launcher and replica count; arguments after -- go to train.py."""
    from commands import bench as benchmark

    try:
        check_recipe(recipe)
        gpus = launch.parse_count("--gpus", gpus)
        counts = benchmark.parse_replicas(replicas) if replicas else benchmark.default_replicas(gpus)
        rounds = launch.parse_count("--rounds", rounds)
        train_args = benchmark.train_args_for(recipe, shlex.split(c.remainder or ""))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = os.path.abspath(out or os.path.join(ROOT, "results", "bench", f"{recipe}-{stamp}"))
        runs_dir = os.path.join(out, "runs")
        runs = benchmark.plan_runs(recipe, benchmark.parse_launchers(launchers), counts, rounds, train_args,
                                   runs_dir, gpus=gpus, python=sys.executable, horovodrun=local_horovodrun())
    except launch.LaunchError as error:
        fail(str(error))
    input_json = os.path.join(out, "input-benchmark.json")
    input_command = benchmark.input_benchmark_command(recipe, ROOT, input_json, shlex.split(input_args),
                                                      python=sys.executable) if input_benchmark else None
    if dry:
        for run in runs:
            show(run.argv, run.env)
        if input_command:
            show(input_command)
        print(f"would write {out}/bench.md, bench.json and bench.png ({len(runs)} training runs)")
        return

    command = shlex.join(["invoke", "bench", *sys.argv[sys.argv.index("bench") + 1:]]) if "bench" in sys.argv \
        else f"invoke bench {recipe}"
    load_before = [round(value, 2) for value in os.getloadavg()]
    records = []
    for index, run in enumerate(runs, 1):
        show(run.argv, run.env)
        record = benchmark.run_measurement(run, ROOT, os.path.join(runs_dir, f"{run.name}.log"))
        records.append(record)
        measured = f"{record['images_per_sec']:,.1f} img/s" if not record.get("error") else f"FAILED: {record['error']}"
        print(f"[{index}/{len(runs)}] round {run.round}/{rounds} {run.launcher} x{run.replicas}: {measured}", flush=True)
    status = None
    if input_command:
        show(input_command)
        with open(os.path.join(out, "input-benchmark.log"), "w") as log:
            status = subprocess.call(input_command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
    machine = {**benchmark.machine_info(),
               "load_average": {"before": load_before, "after": [round(value, 2) for value in os.getloadavg()]}}
    report = benchmark.build_report(
        recipe, records, command=command, date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        machine=machine, gpus=gpus, rounds=rounds, train_args=train_args,
        input_section=benchmark.input_section(recipe, input_command, input_json, status))
    report["git_revision"] = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, text=True,
                                            capture_output=True).stdout.strip() or "unknown"
    paths = benchmark.write_outputs(report, out)
    print(benchmark.render_markdown(report), end="")
    failed = [record for record in records if record.get("error")]
    if failed:
        raise Exit(f"{len(failed)} of {len(records)} runs failed (logs in {runs_dir}); wrote {', '.join(paths.values())}",
                   code=1)
    if not keep_runs:
        shutil.rmtree(runs_dir, ignore_errors=True)
    print(f"wrote {', '.join(paths.values())}")



@task(
    auto_shortflags=False,
    help={
        "tier": "smoke | cpu | gpu (ci/nightly.yaml)",
        "only": "run only the cells whose id (RECIPE/LAUNCHER/RUNTIME/BASE) matches this glob or text, "
                "plus the cells they are compared with",
        "history": "folder of per-night JSON files: read for the regression rule, tonight's record added",
        "out": "folder for report.json, junit.xml, summary.md and history.png (default results/nightly/TIER)",
        "matrix": "the matrix file",
        "table": "print the README's matrix table rendered from the matrix file, run nothing",
        "dry": "list the cells and their commands, run nothing",
    },
)
def nightly(c, tier="smoke", only=None, history=None, out=None, matrix="ci/nightly.yaml", table=False, dry=False):
    """Build the images, run every cell of a tier and the README commands, check them, write the report."""
    from commands import nightly as matrix_file, nightly_report, nightly_run

    try:
        loaded = matrix_file.load_matrix(os.path.join(ROOT, matrix))
        if table:
            print(nightly_report.render_matrix_table(loaded), end="")
            return
        out = os.path.abspath(out or os.path.join(ROOT, "results", "nightly", tier))
        command = shlex.join(["invoke", "nightly", *sys.argv[sys.argv.index("nightly") + 1:]]) \
            if "nightly" in sys.argv else f"invoke nightly --tier {tier}"
        code = nightly_run.run_night(loaded, tier, only, out, history and os.path.abspath(history), dry, command,
                                     settings(c)["ngc_base"])
    except matrix_file.MatrixError as error:
        fail(str(error))
    if code:
        raise Exit(f"the night is red; see {os.path.join(out, 'summary.md')}", code=code)


# -- images: base images --------------------------------------------------------------------------

@task(help={"rootfs": "folder for the Debian root file system", "dry": "print the commands, run nothing"})
def bootstrap(c, rootfs="build/debian-rootfs", dry=False):
    """Make a Debian bookworm base image with debootstrap, for machines that reach no registry."""
    cfg = settings(c)
    rootfs = os.path.abspath(rootfs)  # debootstrap changes directory: a relative path would break
    if not dry:
        shutil.rmtree(rootfs, ignore_errors=True)
        os.makedirs(os.path.dirname(rootfs), exist_ok=True)
    tarball = rootfs + ".tar"
    for argv in containers.build_debian_base_commands(rootfs, tarball, cfg["debian_base"], docker=docker_client(c)):
        if execute(argv, dry=dry):
            raise Exit(f"making {cfg['debian_base']} failed at: {shlex.join(argv)}", code=1)
    if not dry:  # the image holds it now; the ~200 MB tree and the ~120 MB tarball are not needed
        shutil.rmtree(rootfs, ignore_errors=True)
        os.remove(tarball)


@task(help={"base": "image to build on: debian (from images.bootstrap) | slim (python:3.11-slim-bookworm)",
            "ca-bundle": "CA bundle for pip behind a TLS proxy", "dry": "print the command, run nothing"})
def cpu(c, base="debian", ca_bundle=None, dry=False):
    """Build the CPU base image (TF 2.17.1, Keras >= 3.8, Horovod with Gloo and MPI)."""
    cfg = settings(c)
    try:
        launch.check_choice("base", base, ("debian", "slim"))
    except launch.LaunchError as error:
        fail(str(error))
    argv, env = containers.build_docker_build_command(
        "images/cpu/Dockerfile", "images/cpu", cfg["cpu_base"],
        build_args={"BASE_IMAGE": cfg["debian_base"] if base == "debian" else None},
        labels={"org.opencontainers.image.revision": git_revision()},
        ca_bundle=ca_bundle_from(ca_bundle), docker=docker_client(c))
    if execute(argv, env, dry):
        raise Exit(f"building {cfg['cpu_base']} failed", code=1)


images = Collection("images", bootstrap, cpu)
namespace = Collection(run, build, sbatch, bench, nightly, images)
namespace.add_task(k8s_manifests, name="k8s")
namespace.add_task(launch_files_task, name="launch-files")
namespace.configure({"tf_recipes": DEFAULTS})
