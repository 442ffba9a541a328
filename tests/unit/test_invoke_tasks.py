"""invoke tasks as a user meets them: help text, --dry, one-line errors for bad input, and what
becomes of a command invoke started when invoke itself is killed."""
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from error_checks import assert_one_error_line
from helpers import REPO, run_invoke


def test_tasks_are_listed_with_help():
    listing = run_invoke("--list")
    assert listing.returncode == 0
    for name in ("run", "build", "images.bootstrap", "images.cpu"):
        assert name in listing.stdout
    helptext = run_invoke("--help", "run")
    assert "--cpu-replicas" in helptext.stdout and "--dry" in helptext.stdout


def positional_tasks() -> list[str]:
    """Every task whose first argument is positional (invoke would hand it a --help)."""
    from tasks import namespace
    return sorted(name for name in namespace.task_names if namespace[name].positional)


@pytest.mark.parametrize("name", positional_tasks())
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_task_help_after_the_task_name_shows_the_help(name, flag):
    process = run_invoke(name, flag)
    assert process.returncode == 0, process.stderr
    assert process.stdout.startswith(f"Usage: inv[oke] [--core-opts] {name} ") and "--dry" in process.stdout


def test_every_task_whose_first_argument_is_positional_is_covered():
    assert {"run", "build", "sbatch", "k8s", "bench", "new"} <= set(positional_tasks())


@pytest.mark.parametrize("args,message", [
    (["run", "mnist"], "unknown recipe 'mnist'; choose one of: "),
    (["run", "mnist-cnn", "--launcher", "deepspeed"], "unknown launcher 'deepspeed'"),
    (["run", "mnist-cnn", "--gpus", "two"], "--gpus 'two' is not a whole number"),
    (["run", "mnist-cnn", "--gpus", "2", "--cpu-replicas", "4"], "applies only with --gpus 0"),
    (["run", "mnist-cnn", "--runtime", "podman"], "unknown runtime 'podman'"),
    (["build", "mnist-cnn", "--base", "rocm"], "unknown base 'rocm'; choose one of: ngc, gpu, cpu"),
])
def test_bad_input_gets_one_line_naming_the_value(args, message):
    process = run_invoke(*args, "--dry", "--runtime", "local") if args[0] == "run" and "--runtime" not in args \
        else run_invoke(*args, "--dry")
    assert process.returncode == 2
    assert message in process.stderr
    assert "Traceback" not in process.stderr


def test_a_missing_data_dir_stops_a_run_but_not_a_dry_run():
    process = run_invoke("run", "mnist-cnn", "--runtime", "local", "--data-dir", "/nonexistent/data")
    assert process.returncode == 2 and "--data-dir /nonexistent/data is not a folder" in process.stderr
    dry = run_invoke("run", "mnist-cnn", "--runtime", "local", "--data-dir", "/nonexistent/data", "--dry")
    assert dry.returncode == 0 and "--data-dir /nonexistent/data" in dry.stdout


def test_dry_run_prints_the_command_and_runs_nothing(tmp_path):
    results = tmp_path / "never"
    process = run_invoke("run", "mnist-cnn", "--gpus", "0", "--cpu-replicas", "2", "--launcher", "multiworker",
                         "--runtime", "local", "--results-dir", str(results), "--dry", "--", "--max-steps", "3")
    assert process.returncode == 0
    assert "tf_recipes.operations.spawn --nproc 2" in process.stdout and "--max-steps 3" in process.stdout
    assert not results.exists()


def test_the_faults_a_test_asks_for_reach_the_container():
    asked = {"TF_RECIPES_FAULT_SLOW_STEP": "0.5", "TF_RECIPES_FAULT_DESYNC_REPLICA": ""}  # empty: not asked
    docker = run_invoke("run", "mnist-cnn", "--runtime", "docker", "--dry", env=asked)
    assert docker.returncode == 0 and "-e TF_RECIPES_FAULT_SLOW_STEP " in docker.stdout, docker.stdout
    # what injects it
    assert "python -m tf_recipes.operations.faults recipes/mnist-cnn/train.py --launcher" in docker.stdout
    assert "TF_RECIPES_FAULT_DESYNC_REPLICA" not in docker.stdout
    apptainer = run_invoke("run", "mnist-cnn", "--runtime", "apptainer", "--dry", env=asked)
    assert apptainer.returncode == 0 and "--env TF_RECIPES_FAULT_SLOW_STEP=0.5 " in apptainer.stdout, apptainer.stdout
    plain = run_invoke("run", "mnist-cnn", "--runtime", "docker", "--dry")
    assert "TF_RECIPES_FAULT" not in plain.stdout and "tf_recipes.operations.faults" not in plain.stdout


def test_nsys_adds_the_profiling_capability_only_when_asked():
    profiled = run_invoke("run", "mnist-cnn", "--gpus", "8", "--runtime", "docker", "--nsys", "--dry")
    assert profiled.returncode == 0 and "--cap-add SYS_ADMIN" in profiled.stdout and "nsys profile" in profiled.stdout
    plain = run_invoke("run", "mnist-cnn", "--gpus", "8", "--runtime", "docker", "--dry")
    assert "SYS_ADMIN" not in plain.stdout and "--privileged" not in plain.stdout + profiled.stdout
    cpu = run_invoke("run", "mnist-cnn", "--gpus", "0", "--runtime", "docker", "--nsys", "--dry")
    assert cpu.returncode == 2 and "only the NGC image has" in cpu.stderr


def test_container_paths_must_go_to_invoke_so_they_are_mounted():
    process = run_invoke("run", "mnist-cnn", "--runtime", "docker", "--dry", "--", "--data-dir", "/srv/mnist")
    assert process.returncode == 2 and "give --data-dir to invoke run (before --)" in process.stderr


def test_bootstrap_gives_debootstrap_an_absolute_root(tmp_path):
    process = run_invoke("images.bootstrap", "--rootfs", "relative/rootfs", "--dry")
    assert process.returncode == 0
    lines = [line for line in process.stdout.splitlines() if line.startswith("+ ")]
    assert lines[0].split()[1] == "debootstrap"
    assert os.path.isabs(lines[0].split()[-1]) and lines[0].endswith("relative/rootfs")
    assert " import " in lines[-1] and lines[-1].endswith("tf-recipes/debian:bookworm")


def test_build_from_a_definition_writes_it_and_needs_apptainer(tmp_path):
    """--definition: the .def the SIF is built from, written where the SIF goes; then `apptainer build`,
    which this machine does not have: one line, status 2."""
    from commands.containers import render_apptainer_definition

    process = run_invoke("build", "mnist-cnn", "--base", "cpu", "--runtime", "apptainer", "--definition",
                         env={"INVOKE_TF_RECIPES_SIF_DIR": str(tmp_path),
                              "INVOKE_TF_RECIPES_APPTAINER": "no-apptainer-here"})
    assert process.returncode == 2 and "Traceback" not in process.stderr
    assert process.stderr.strip() == "error: no-apptainer-here is not installed or not on PATH"
    assert (tmp_path / "mnist-cnn_cpu.def").read_text() == \
        render_apptainer_definition("tf-recipes/cpu-base:latest", "mnist-cnn")
    assert f"no-apptainer-here build {tmp_path}/mnist-cnn_cpu.sif {tmp_path}/mnist-cnn_cpu.def" in process.stdout
    refused = run_invoke("build", "mnist-cnn", "--definition", "--dry")
    assert refused.returncode == 2 and "add --runtime apptainer" in refused.stderr


# A docker client whose engine holds no image: `docker image ls` lists nothing; anything else would build or run.
EMPTY_DOCKER = """#!/bin/sh
[ "$1 $2" = "image ls" ] && exit 0
echo "docker $* was called" >&2
exit 1
"""


@pytest.mark.parametrize("args,needle", [
    (["build", "mnist-cnn", "--stack", "current"], "tf-recipes/gpu-base:current is not built; run `invoke images.gpu"),
    (["build", "mnist-cnn", "--base", "cpu"], "tf-recipes/cpu-base:latest is not built; run `invoke images.cpu"),
    (["images.gpu"], "tf-recipes/debian:bookworm is not built; run `invoke images.bootstrap` first"),
    (["images.cpu", "--stack", "current"], "tf-recipes/debian:bookworm is not built; run `invoke images.bootstrap`"),
], ids=["build-current-gpu", "build-cpu", "images-gpu", "images-cpu"])
def test_a_missing_base_image_names_the_task_that_makes_it_before_docker_builds(tmp_path, args, needle):
    docker = tmp_path / "docker"
    docker.write_text(EMPTY_DOCKER)
    docker.chmod(0o755)
    process = run_invoke(*args, env={"INVOKE_TF_RECIPES_DOCKER": str(docker)}, timeout=120)
    assert_one_error_line(process, needle)
    assert "was called" not in process.stderr


WHEEL_NAME = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"


def a_wheel(folder, name=WHEEL_NAME):
    path = folder / name
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("horovod/__init__.py", "")
    return path


def not_a_zip(path):
    path.write_text("not a zip")
    return path


@pytest.mark.parametrize("make,extra,needle", [
    (lambda tmp: tmp / WHEEL_NAME, [], "does not exist; give the wheel bash ci/setup.sh --horovod built"),
    (lambda tmp: tmp, [], "is a folder; give the wheel"),
    (lambda tmp: a_wheel(tmp, "horovod-0.28.1-cp312-cp312-linux_x86_64.whl"), [],
     f"is not {WHEEL_NAME}, the Horovod the CPU base installs for its Python 3.11"),
    (lambda tmp: not_a_zip(tmp / WHEEL_NAME), [], "is not a wheel (not a zip file)"),
    (a_wheel, ["--stack", "current"], "the current stack's CPU base has no Horovod; drop it"),
], ids=["missing", "folder", "other-python", "not-a-zip", "current-stack"])
def test_a_horovod_wheel_the_cpu_base_cannot_take_is_one_line_before_docker(tmp_path, make, extra, needle):
    docker = tmp_path / "docker"
    docker.write_text(EMPTY_DOCKER)
    docker.chmod(0o755)
    process = run_invoke("images.cpu", "--horovod-wheel", str(make(tmp_path)), *extra,
                         env={"INVOKE_TF_RECIPES_DOCKER": str(docker)}, timeout=120)
    assert_one_error_line(process, needle)
    assert "was called" not in process.stderr


def test_a_horovod_wheel_setting_the_cpu_base_cannot_take_names_the_setting(tmp_path):
    docker = tmp_path / "docker"
    docker.write_text(EMPTY_DOCKER)
    docker.chmod(0o755)
    process = run_invoke("images.cpu", env={"INVOKE_TF_RECIPES_DOCKER": str(docker),
                                            "INVOKE_TF_RECIPES_HOROVOD_WHEEL": str(tmp_path / WHEEL_NAME)}, timeout=120)
    assert_one_error_line(process, "the setting horovod_wheel (INVOKE_TF_RECIPES_HOROVOD_WHEEL) "
                                   f"{tmp_path / WHEEL_NAME} does not exist")
    assert "was called" not in process.stderr


def test_a_horovod_wheel_goes_into_the_build_context_and_the_build_takes_it(tmp_path):
    wheel = a_wheel(tmp_path)
    process = run_invoke("images.cpu", "--horovod-wheel", str(wheel), "--dry")
    assert process.returncode == 0, process.stderr
    copy, build = process.stdout.splitlines()[-2:]
    assert copy == f"+ cp {wheel} build/horovod-wheel/{WHEEL_NAME}"
    assert "-f images/cpu/Dockerfile" in build and "--build-arg HOROVOD=wheel" in build
    # The setting horovod_wheel is the flag's default for the ngc-25.02 stack; "" (its default) compiles Horovod.
    with_setting = run_invoke("images.cpu", "--dry", env={"INVOKE_TF_RECIPES_HOROVOD_WHEEL": str(wheel)})
    assert with_setting.returncode == 0 and with_setting.stdout.splitlines()[-2:] == [copy, build]
    unset = {"INVOKE_TF_RECIPES_HOROVOD_WHEEL": ""}
    assert "HOROVOD=wheel" not in run_invoke("images.cpu", "--dry", env=unset).stdout
    current = run_invoke("images.cpu", "--stack", "current", "--dry",
                         env={"INVOKE_TF_RECIPES_HOROVOD_WHEEL": str(wheel)})
    assert current.returncode == 0 and "HOROVOD=wheel" not in current.stdout and "horovod" not in current.stdout


# A stand-in for a training job (or a `docker run` client, which passes the signal to its container):
# it says which signal stopped it.
STAND_IN = """
import os, signal, sys, time

def stopped(signum, frame):
    with open(sys.argv[1] + ".signal", "w") as handle:
        handle.write(signal.Signals(signum).name)
    sys.exit(143)

signal.signal(signal.SIGTERM, stopped)
with open(sys.argv[1] + ".pid", "w") as handle:
    handle.write(str(os.getpid()))
time.sleep(60)
"""


def wait_for(path, seconds=20.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_command_invoke_started_is_stopped_when_invoke_is_killed_outright(tmp_path):
    """SIGKILL reaches no handler, so invoke cannot pass a stop on (tasks/host.py execute): the
    kernel sends the command SIGTERM instead, and it stops as it would on `invoke run`'s own SIGTERM."""
    (tmp_path / "job.py").write_text(STAND_IN)
    marker = tmp_path / "job"
    execute = "import sys; from tasks import host; host.execute(sys.argv[1:])"
    invoke = subprocess.Popen([sys.executable, "-c", execute, sys.executable, str(tmp_path / "job.py"), str(marker)],
                              cwd=REPO, stdout=subprocess.DEVNULL)
    pid = None
    try:
        pid = int(wait_for(tmp_path / "job.pid") or 0) or None
        assert pid, "the stand-in job never started"
        invoke.kill()
        invoke.wait(timeout=30)
        assert wait_for(tmp_path / "job.signal", seconds=10) == "SIGTERM"
    finally:
        invoke.kill()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
