"""What the tasks ask of this machine, each written once: the settings, the recipes here, the docker
client and engine, the git revision, the CA bundle, and running a command with its stop signals
passed on. The builders in commands/ take these as plain values."""
from __future__ import annotations

import datetime
import os
import shlex
import shutil
import signal
import subprocess
import sys

from invoke import Exit

from commands import choices, containers, launch
from tf_recipes import atomic, contract, user_paths
from tf_recipes.operations import spawn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Defaults of the `tf_recipes` configuration; invoke.yaml or INVOKE_TF_RECIPES_* override them, for
# `invoke run` and `invoke nightly` alike.
DEFAULTS = {
    "image_prefix": "tf-recipes",
    # The bases of the ngc-25.02 stack: NVIDIA's image, and images/cpu built locally.
    "ngc_base": "nvcr.io/nvidia/tensorflow:25.02-tf2-py3",
    "cpu_base": "tf-recipes/cpu-base:latest",
    # The bases of the current stack: images/current's targets gpu and cpu, both built locally.
    "current_gpu_base": "tf-recipes/gpu-base:current",
    "current_cpu_base": "tf-recipes/cpu-base:current",
    "debian_base": "tf-recipes/debian:bookworm",
    "docker": "auto",  # a docker client path, or auto: the first that can build with BuildKit
    # `docker run --ulimit memlock=-1` as NVIDIA recommends; "" leaves the limit alone (for hosts
    # and sandboxes that refuse to raise it: "error setting rlimit type 8").
    "memlock": "-1",
    "apptainer": "apptainer",
    "sif_dir": "build/sif",
    # A Horovod wheel the ngc-25.02 CPU base installs instead of compiling Horovod (images.cpu
    # --horovod-wheel); "" compiles it. ci/test.sh sets it to the one ci/setup.sh --horovod built.
    "horovod_wheel": "",
}


def settings(c) -> dict:
    return {**DEFAULTS, **c.config.get("tf_recipes", {})}


def fail(message: str):
    """A user mistake: one line on stderr and exit status 2, no traceback."""
    raise Exit(f"error: {message}", code=2)


def recipes() -> list[str]:
    """Recipe folders: every recipes/NAME that has a train.py."""
    folder = os.path.join(ROOT, "recipes")
    return sorted(name for name in os.listdir(folder) if os.path.isfile(os.path.join(folder, name, "train.py")))


def help_for(value: str, task_name: str) -> None:
    """`invoke TASK --help` for a task whose first argument is positional: invoke hands `--help` to
    that argument, so the task shows its help itself, as `invoke --help TASK` does."""
    if value in ("--help", "-h"):
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-m", "invoke", "--search-root", ROOT, "--help", task_name])


def check_recipe(recipe: str, task_name: str) -> None:
    """A LaunchError naming the recipe and the choices, for a name that is not a recipe folder
    (and the task's help for `invoke TASK --help`)."""
    help_for(recipe, task_name)
    launch.check_choice("recipe", recipe, recipes())


def stamp() -> str:
    """The local time that names a run's folder."""
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def command_line(task: str, fallback: str) -> str:
    """The invoke command line as the user typed it, for reports (`fallback` when called otherwise)."""
    if task in sys.argv:
        return shlex.join(["invoke", task, *sys.argv[sys.argv.index(task) + 1:]])
    return fallback


def git_revision() -> str:
    """The checkout's commit, with -dirty when it has uncommitted changes ("unknown" outside git)."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def check_stack(stack: str, base: str | None = None) -> None:
    """A LaunchError for an unknown stack, or a base the stack has no image on."""
    launch.check_choice("stack", stack, contract.STACKS)
    if base is not None and base not in choices.STACK_BASES[stack]:
        raise launch.LaunchError(f"the {stack} stack has no {base!r} base; choose one of: "
                                 f"{', '.join(choices.STACK_BASES[stack])}")


def base_image(c, stack: str, base: str) -> str:
    """The image a recipe image of `stack` builds FROM for `base` (the settings above)."""
    cfg = settings(c)
    if stack == contract.DEFAULT_STACK:
        return cfg["ngc_base"] if base == "ngc" else cfg["cpu_base"]
    return cfg["current_cpu_base"] if base == "cpu" else cfg["current_gpu_base"]


def _image_name(stack: str, base: str) -> str:
    """`ngc`, `cpu` on the default stack; `current-gpu`, `current-cpu` on the other."""
    return base if stack == contract.DEFAULT_STACK else f"{stack}-{base}"


def image_tag(c, recipe: str, base: str, stack: str = contract.DEFAULT_STACK) -> str:
    return f"{settings(c)['image_prefix']}/{recipe}:{_image_name(stack, base)}"


def sif_path(c, recipe: str, base: str, stack: str = contract.DEFAULT_STACK) -> str:
    return os.path.join(settings(c)["sif_dir"], f"{recipe}_{_image_name(stack, base)}.sif")


def installed_stack() -> str:
    """The stack of the TensorFlow installed beside this Python (what --runtime local runs)."""
    from importlib import metadata
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            return contract.stack_of_tensorflow(metadata.version(name))
        except metadata.PackageNotFoundError:
            continue
    fail("no TensorFlow is installed beside this Python; run `bash ci/setup.sh` (or give --runtime docker)")


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


def local_images(docker: str) -> list[str] | None:
    """REPOSITORY:TAG of every image the Docker engine holds; None when no engine answers."""
    try:
        listed = subprocess.run(containers.build_local_images_command(docker), capture_output=True, text=True)
    except OSError:
        return None
    return listed.stdout.split() if listed.returncode == 0 else None


def require_image(docker: str, image: str, makers: dict) -> None:
    """One line and exit 2, before Docker is called, when `image` is one a task makes (`makers`: image ->
    the task's command) and it is not on this machine, or when no Docker engine answers."""
    problem = containers.missing_image_problem(image, local_images(docker), makers)
    if problem:
        fail(problem)


def local_horovodrun() -> str:
    """The horovodrun installed next to this Python (the venv's), else whichever is on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    return beside if os.path.exists(beside) else "horovodrun"


def ca_bundle_from(explicit: str | None) -> str | None:
    """The site CA bundle for pip in builds: --ca-bundle, else SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT."""
    for candidate in (explicit, os.environ.get("SSL_CERT_FILE"), os.environ.get("REQUESTS_CA_BUNDLE"),
                      os.environ.get("PIP_CERT")):
        if candidate:
            what = user_paths.what_is(candidate)  # never opened here: docker build would wait on a FIFO
            if what != user_paths.FILE:
                fail(f"CA bundle {candidate} {'does not exist' if what == user_paths.MISSING else 'is ' + what}; "
                     "pass --ca-bundle PATH of a file or unset the variable")
            return os.path.abspath(candidate)
    return None


def show(argv, env=None) -> None:
    print(launch.echo_line(argv, env), flush=True)


# How long a job has to stop with a checkpoint after an interrupt before it is killed: the containers'
# own --stop-timeout (commands/containers.py), so `docker stop` and Ctrl-C leave a job the same time.
INTERRUPT_GRACE_SECONDS = 60


def execute(argv, env=None, dry=False, leftover=None, cwd=None) -> int:
    """Print the command, then (unless dry) run it with the terminal attached and return its status.

    An interrupt (Ctrl-C, or SIGINT sent to invoke alone) stops the job as a scheduler would: SIGTERM,
    on which it checkpoints and exits. A second interrupt, or a job still running after
    INTERRUPT_GRACE_SECONDS, kills it; then `leftover` (a command, such as `docker rm -f NAME` for
    the container this run named) removes what the killed command leaves behind. It runs in `cwd`
    (default: the repository root).
    """
    show(argv, env)
    if dry:
        return 0
    try:
        # Should invoke be killed outright, the command still gets SIGTERM (spawn.stopped_with_parent).
        process = subprocess.Popen(argv, cwd=cwd or ROOT, env={**os.environ, **(env or {})},
                                   preexec_fn=spawn.stopped_with_parent())
    except FileNotFoundError:
        fail(f"{argv[0]} is not installed or not on PATH")
    # SIGTERM/SIGUSR1 to invoke (a scheduler stopping the job) go on to the job, which checkpoints.
    with spawn.forwarding_stop_signals([process]):
        try:
            return process.wait()
        except KeyboardInterrupt:
            # A terminal's Ctrl-C reached the job too (same process group); a SIGINT to invoke alone
            # did not, and a docker client never passes it on: the job hears SIGTERM either way.
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout=INTERRUPT_GRACE_SECONDS)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):  # a second Ctrl-C, or it hangs
                process.kill()
                code = process.wait()
                if leftover:
                    subprocess.run(leftover, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
                return code


def check_creatable(flag: str, path: str | None, dry: bool) -> None:
    """Before any work starts: one line and exit 2 when the folder `path` (a flag's value) cannot be made
    (tf_recipes.user_paths.creatable_problem). With --dry only a note, since nothing is made and the
    commands may be meant for another machine."""
    problem = path and user_paths.creatable_problem(flag, path)
    if problem and not dry:
        fail(problem)
    if problem:
        print(f"note: {problem}", file=sys.stderr)


def make_folder(flag: str, path: str) -> None:
    """A folder a task creates, with its parents (tf_recipes.user_paths.make_folder); one line and exit 2 when it
    cannot be made."""
    problem = user_paths.make_folder(flag, path)
    if problem:
        fail(problem)


def write_atomically(path: str, text: str) -> None:
    """`path` holds `text` or what it held before, also after a crash (tf_recipes.atomic)."""
    atomic.write_atomically(path, text)


def write_or_print(text: str, out: str | None, dry: bool, next_step: str, flag: str = "--out") -> None:
    """A rendered file: written to `out` (unless dry; its folder made if missing, the file whole or not at
    all), else printed. `out` must be a file or nothing yet: a folder, a FIFO (whose open would wait for a
    reader) or a device is refused in one line."""
    what = user_paths.what_is(out) if out else user_paths.MISSING
    if out and what not in (user_paths.FILE, user_paths.MISSING):
        fail(f"{flag} {out} is {what}, not a file; give the path of the file to write")
    named, folder = user_paths.folder_of(flag, out) if out else (flag, None)
    check_creatable(named, folder, dry)
    if out and not dry:
        make_folder(named, folder)
        write_atomically(out, text)
        print(f"wrote {out}; {next_step}")
    else:
        print(text, end="")
