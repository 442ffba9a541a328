"""Container commands: Debian base image, `docker build`, `docker run`, Apptainer build and exec.

Every function takes plain values and returns an argv list (plus, for `docker build`, the extra
environment it needs). Nothing here runs a process, touches the file system or reads the caller's
environment; the tasks (tasks/) do that with what these return.

Paths inside every container are the same, so one train command works in Docker, in Apptainer and
on the host from the repository root:

    /workspace/tf-recipes   the working directory: recipes/<name>/ holds the recipe's folder (the library,
                            tf_recipes, is installed from its wheel)
    /data                   the dataset, read-only
    /results                checkpoints, logs and measurements, read-write
"""
from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence

CONTAINER_WORKDIR = "/workspace/tf-recipes"
CONTAINER_DATA_DIR = "/data"
CONTAINER_RESULTS_DIR = "/results"

# The Dockerfiles read the site CA bundle from this BuildKit secret (`RUN --mount=type=secret,id=...`).
PIP_CERT_SECRET_ID = "pipcert"

DEBOOTSTRAP_VARIANTS = ("minbase", "buildd", "fakechroot")

# The file `invoke images.bootstrap` writes into the root file system folder it makes: a folder is
# deleted (when the task runs again, and after the import) only if it holds this file.
ROOTFS_MARKER = ".tf-recipes-rootfs"

# Left out of the base image tarball: apt's package cache and index files. Every Dockerfile runs
# `apt-get update` first (into a cache mount), so they would only add ~80 MB to the base image.
# The marker is not part of the image either.
ROOTFS_TAR_EXCLUDES = (
    "./var/cache/apt/archives/*.deb",
    "./var/cache/apt/*.bin",
    "./var/lib/apt/lists/*",
    f"./{ROOTFS_MARKER}",
)


# ---------------------------------------------------------------------------------------------
# A Debian base image without a registry: debootstrap, tar, docker import
# ---------------------------------------------------------------------------------------------

def build_debootstrap_command(rootfs: str, suite: str = "bookworm", variant: str = "minbase",
                              mirror: str | None = None) -> list[str]:
    """`debootstrap` a Debian root file system into `rootfs` (needs root; about a minute)."""
    _require_value("rootfs", rootfs)
    if posixpath.normpath(rootfs).strip("/") == "":
        raise ValueError("rootfs '/' would debootstrap over the running system; give an empty directory")
    _require_value("suite", suite)
    if variant not in DEBOOTSTRAP_VARIANTS:
        raise ValueError(f"debootstrap variant {variant!r} is unknown; use one of {', '.join(DEBOOTSTRAP_VARIANTS)}")
    argv = ["debootstrap", f"--variant={variant}", suite, rootfs]
    if mirror:
        argv.append(mirror)
    return argv


def build_rootfs_tar_command(rootfs: str, tarball: str) -> list[str]:
    """Pack `rootfs` into `tarball`, without apt's caches (see ROOTFS_TAR_EXCLUDES).

    The import is two commands joined by a file rather than the usual pipe
    (`tar -C ROOTFS -c . | docker import - TAG`), so that both run without a shell and a failure
    of either has its own exit status.
    """
    _require_value("rootfs", rootfs)
    _require_value("tarball", tarball)
    excludes = [f"--exclude={pattern}" for pattern in ROOTFS_TAR_EXCLUDES]
    return ["tar", "-C", rootfs, *excludes, "-c", "-f", tarball, "."]


def build_docker_import_command(tarball: str, tag: str, docker: str = "docker") -> list[str]:
    """Turn the tarball of a root file system into the image `tag`."""
    _require_value("tarball", tarball)
    _require_image("tag", tag)
    return [docker, "import", tarball, tag]


def build_debian_base_commands(rootfs: str, tarball: str, tag: str, *, suite: str = "bookworm",
                               variant: str = "minbase", mirror: str | None = None,
                               docker: str = "docker") -> list[list[str]]:
    """The three commands, in order, that make a local Debian base image: debootstrap, tar, import."""
    return [
        build_debootstrap_command(rootfs, suite=suite, variant=variant, mirror=mirror),
        build_rootfs_tar_command(rootfs, tarball),
        build_docker_import_command(tarball, tag, docker=docker),
    ]


# ---------------------------------------------------------------------------------------------
# The library's wheel, which a recipe image installs from the recipe folder's wheels/
# ---------------------------------------------------------------------------------------------

# The files of the repository the library's wheel is built from (pyproject.toml names them).
LIBRARY_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "common", "stacks")
WHEELS_DIR = "wheels"  # in a recipe folder; gitignored


# The time stamp of every file in the library's wheel (1980-01-01, the earliest a zip file holds): the same
# sources then make the same wheel byte for byte, so an image build that mounts it reuses its cached layer.
WHEEL_SOURCE_DATE_EPOCH = "315532800"


def build_library_wheel_command(source: str, wheels: str, python: str = "python") -> tuple[list[str], dict[str, str]]:
    """`pip wheel` of the library (tf-recipes) in `source` into the folder `wheels`: no dependencies (the
    image installs them with the stack's pins) and no build isolation (the venv's setuptools, so no
    download is needed). Returns (argv, extra environment): SOURCE_DATE_EPOCH makes the wheel reproducible."""
    _require_value("source", source)
    _require_value("wheels", wheels)
    return ([python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels, source],
            {"SOURCE_DATE_EPOCH": WHEEL_SOURCE_DATE_EPOCH})


# ---------------------------------------------------------------------------------------------
# docker build
# ---------------------------------------------------------------------------------------------

def build_docker_build_command(dockerfile: str, context: str, tag: str, build_args: Mapping[str, str | None],
                               labels: Mapping[str, str], ca_bundle: str | None, docker: str = "docker",
                               progress: str = "plain", target: str | None = None) -> tuple[list[str], dict[str, str]]:
    """`docker build` with BuildKit; returns (argv, extra environment to add to the caller's).

    Why the docker CLI and not the docker SDK for Python: the SDK's `images.build` talks to the
    engine's legacy builder, which has neither `RUN --mount` (the cache and secret mounts every
    Dockerfile here uses) nor `--secret`, so these Dockerfiles do not build through it. The CLI
    with `DOCKER_BUILDKIT=1` has both and streams the build log as it goes (`--progress=plain`).
    The client must have BuildKit built in or the buildx plugin: `ci/docker-engine.sh` prints one
    that does (Debian's `/usr/bin/docker` 20.10 here), and that path is what `docker` should be.

    `ca_bundle` (for example /etc/ssl/certs/ca-certificates.crt behind a TLS-intercepting proxy)
    reaches pip only as the BuildKit secret `pipcert`, so it never lands in an image layer.
    Build arguments whose value is None are left out, so the Dockerfile's default applies.
    `target` builds that stage of a multi-stage Dockerfile (`--target`) instead of the last.
    """
    _require_value("dockerfile", dockerfile)
    _require_value("context", context)
    _require_image("tag", tag)
    argv = [docker, "build"]
    if progress:
        argv.append(f"--progress={progress}")
    argv += ["-f", dockerfile, "-t", tag]
    if target:
        argv += ["--target", _require_key("target", target)]
    for key, value in build_args.items():
        if value is not None:
            argv += ["--build-arg", f"{_require_key('build arg', key)}={value}"]
    for key, value in labels.items():
        argv += ["--label", f"{_require_key('label', key)}={value}"]
    if ca_bundle:
        if any(c in ca_bundle for c in ',"\n\r'):  # `--secret` reads its value as CSV, like --mount
            raise ValueError(f"--ca-bundle {ca_bundle!r} contains a comma, a double quote or a line break, which "
                             "`docker build --secret` cannot take; copy or link the bundle to a path without them")
        argv += ["--secret", f"id={PIP_CERT_SECRET_ID},src={ca_bundle}"]
    argv.append(context)
    return argv, {"DOCKER_BUILDKIT": "1"}


# ---------------------------------------------------------------------------------------------
# docker run
# ---------------------------------------------------------------------------------------------

GpuSelection = int | str | Sequence[int]


def docker_gpus_value(gpus: GpuSelection) -> str | None:
    """The value of `docker run --gpus`, or None for no GPU.

    0 -> None (CPU only); "all" -> "all"; N -> "N" (the first N GPUs); [0, 1] -> '"device=0,1"'.
    The device list keeps its double quotes: `--gpus` parses its value as CSV, and without them the
    comma would split "device=0" from "1". No shell is involved, so no further quoting is needed.
    """
    kind, value = _parse_gpus(gpus)
    if kind == "none":
        return None
    if kind == "all":
        return "all"
    if kind == "count":
        return str(value)
    return '"device=' + ",".join(str(d) for d in value) + '"'


def build_docker_run_command(image: str, inner_argv: Sequence[str], *, gpus: GpuSelection,
                             env: Mapping[str, str], forward_env: Sequence[str] = (), data_dir: str | None = None,
                             results_dir: str | None = None, user: str | None = None,
                             shm_size: str = "1g", network: str | None = None, profile: bool = False,
                             name: str | None = None, interactive: bool = False, ipc: str | None = "host",
                             memlock: int | None = -1, stack: int | None = 67108864,
                             stop_timeout: int | None = 60, docker: str = "docker") -> list[str]:
    """`docker run` with NVIDIA's recommended flags for its framework containers, and one of Docker's
    own hardening flags.

    - `--rm`; `--gpus` unless `gpus` is 0 (see `docker_gpus_value`).
    - `--security-opt no-new-privileges` (not in NVIDIA's list): no process in the container gains
      privileges through a setuid or file-capability binary (sudo, su, ping), so a job that runs as
      the caller (`user`) stays the caller. No image or launcher here uses one (no sudo, su or
      gosu).
    - `--ipc=host` so that processes of one job (NCCL, MPI, DataLoader-style workers) share memory.
      With the host's IPC namespace Docker ignores `--shm-size` (checked: /dev/shm was the host's
      24G with `--shm-size 1g`), so `--shm-size` is given only when `ipc` is not "host".
    - `--ulimit memlock=-1` (pinned memory for GPU transfers) and `--ulimit stack=67108864` (64 MiB).
      Some sandboxes refuse to raise memlock ("error setting rlimit type 8: operation not
      permitted"); pass `memlock=None` there to leave the limit alone.
    - `data_dir` bind-mounted read-only at /data, `results_dir` read-write at /results. Both must be
      absolute host paths; `--mount` (unlike `-v`) fails if the path is missing instead of creating
      a root-owned empty directory.
    - `user` ("UID:GID") runs as the caller, so results are theirs; the images set HOME=/tmp.
    - `-e K=V` for each `env` entry; `-e K` for each name in `forward_env`: the docker client's own
      value of K (such as the TF_RECIPES_FAULT_* variables a test gives `invoke run`), not written into
      the command.
    - Never `--privileged`. `--cap-add SYS_ADMIN` only with `profile=True`: GPU profilers (Nsight)
      read the performance counters, which needs it.
    - `-it` only with `interactive=True` (a terminal; CI has none).
    - `--init`: a small init process is PID 1 and passes SIGTERM/SIGUSR1 on to the launcher, which
      as PID 1 would never see them (the kernel drops signals PID 1 has no handler for). With
      `--stop-timeout`, `docker stop` leaves the job that long to checkpoint before SIGKILL.
    """
    _require_image("image", image)
    argv = [docker, "run", "--rm", "--init", "--security-opt", "no-new-privileges"]
    if stop_timeout is not None:
        argv += ["--stop-timeout", str(stop_timeout)]
    if interactive:
        argv.append("-it")
    if name:
        argv += ["--name", name]
    gpu_value = docker_gpus_value(gpus)
    if gpu_value is not None:
        argv += ["--gpus", gpu_value]
    if ipc:
        argv.append(f"--ipc={ipc}")
    if ipc != "host" and shm_size:
        argv += ["--shm-size", shm_size]
    if memlock is not None:
        argv += ["--ulimit", f"memlock={memlock}"]
    if stack is not None:
        argv += ["--ulimit", f"stack={stack}"]
    if profile:
        argv += ["--cap-add", "SYS_ADMIN"]
    if user:
        argv += ["-u", user]
    if network:
        argv += ["--network", network]
    if data_dir:
        argv += ["--mount", _bind_mount("--data-dir", data_dir, CONTAINER_DATA_DIR, readonly=True)]
    if results_dir:
        argv += ["--mount", _bind_mount("--results-dir", results_dir, CONTAINER_RESULTS_DIR, readonly=False)]
    for key, value in env.items():
        argv += ["-e", f"{_require_key('environment variable', key)}={value}"]
    for key in forward_env:
        argv += ["-e", _require_key("environment variable", key)]
    argv.append(image)
    argv += list(inner_argv)
    return argv


# ---------------------------------------------------------------------------------------------
# Apptainer (HPC sites). On the Debian 12 development machines `bash ci/apptainer.sh` provides it
# (tests/integration/test_apptainer.py builds a SIF and trains in it); `--nv` is only rendered here.
# ---------------------------------------------------------------------------------------------

# How the SIF's squashfs is compressed: Apptainer's default gzip, which every installation mounts, or
# zstd (level 3), about 3x faster to build (a 2.6 GB image: 1.2 instead of 4.1 minutes on 2 cores)
# for a SIF of about the same size, mounted by any squashfuse or kernel with zstd support.
SIF_COMPRESSION_ARGS = {"gzip": None, "zstd": "-comp zstd -Xcompression-level 3"}


def build_docker_save_command(image: str, tarball: str, docker: str = "docker") -> list[str]:
    """`docker save -o TARBALL IMAGE`: the image as a file `apptainer build` reads (docker-archive:)."""
    _require_image("image", image)
    _require_value("tarball", tarball)
    return [docker, "save", "-o", tarball, image]


def build_apptainer_build_command(sif: str, image: str, apptainer: str = "apptainer",
                                  compression: str = "gzip") -> list[str]:
    """Make a SIF file: `apptainer build [--mksquashfs-args ...] SIF SOURCE`.

    `image` is a Docker image in a tarball from `docker save` (`*.tar`: `docker-archive:PATH`, what
    `invoke build --runtime apptainer` uses, since it needs no access to the Docker engine), a
    definition file (`*.def`, see `render_apptainer_definition`; for sites without Docker), or an
    image name (`docker-daemon://IMAGE`, which needs the engine's socket; ":latest" is added to a
    bare name, as docker-daemon needs a tag). `compression`: see SIF_COMPRESSION_ARGS.
    """
    _require_value("sif", sif)
    _require_value("image", image)
    if compression not in SIF_COMPRESSION_ARGS:
        raise ValueError(f"SIF compression {compression!r} is unknown; use one of {', '.join(SIF_COMPRESSION_ARGS)}")
    if image.endswith(".def"):
        source = image
    elif image.endswith(".tar"):
        source = "docker-archive:" + image
    else:
        _require_image("image", image)
        source = "docker-daemon://" + (image if _has_tag(image) else image + ":latest")
    squashfs = SIF_COMPRESSION_ARGS[compression]
    return [apptainer, "build", *(["--mksquashfs-args", squashfs] if squashfs else []), sif, source]


def build_sif_from_image_commands(image: str, sif: str, tarball: str, *, compression: str = "gzip",
                                  docker: str = "docker", apptainer: str = "apptainer") -> list[list[str]]:
    """The two commands, in order, that turn a local Docker image into a SIF: `docker save` into
    `tarball`, then `apptainer build SIF docker-archive:TARBALL` (what HPC users do on a build host
    with Docker; the SIF is then copied to the cluster). The caller deletes the tarball afterwards."""
    if not tarball.endswith(".tar"):
        raise ValueError(f"tarball {tarball!r} must end in .tar")
    if ":" in tarball:  # docker-archive:PATH[:REFERENCE] ends the path at its first colon
        raise ValueError(f"tarball {tarball!r} contains ':', which Apptainer's docker-archive: source cannot hold; "
                         "set sif_dir (invoke.yaml) to a folder whose path has none")
    return [build_docker_save_command(image, tarball, docker=docker),
            build_apptainer_build_command(sif, tarball, apptainer=apptainer, compression=compression)]


def render_apptainer_definition(base_image: str, recipe: str, stack: str = "ngc-25.02") -> str:
    """An Apptainer definition that does what `recipes/<recipe>/Dockerfile` does, from `base_image`,
    with the pins of `stack` (the stack of `base_image`, carried by the library's wheel).

    Build it from the recipe folder (the %files paths are relative to it), with the library's wheel in
    its wheels/ folder, as for the Dockerfile (`pip wheel --no-deps -w wheels /path/to/tf-recipes`):
        apptainer build RECIPE.sif RECIPE.def
    Behind a TLS-intercepting proxy, add `--bind /etc/ssl/certs:/mnt` so pip finds the site bundle
    at /mnt/ca-certificates.crt; like the Docker secret, it is then never part of the image.
    """
    _require_image("base_image", base_image)
    _require_value("recipe", recipe)
    if "/" in recipe or recipe.startswith("."):
        raise ValueError(f"recipe {recipe!r} must be a folder name under recipes/, like 'mnist-cnn'")
    if not stack or "/" in stack or stack.startswith(".") or any(c.isspace() for c in stack):
        raise ValueError(f"stack {stack!r} must be the name of a file in stacks/, like 'ngc-25.02'")
    base = base_image.removeprefix("docker://")
    folder = f"{CONTAINER_WORKDIR}/recipes/{recipe}"
    return f"""\
Bootstrap: docker
From: {base}

%labels
    org.opencontainers.image.title tf-recipes/{recipe}
    org.opencontainers.image.base.name {base}
    org.tf-recipes.recipe {recipe}
    org.tf-recipes.stack {stack}

%files
    *.py {folder}/
    requirements.txt {folder}/
    README.md {folder}/
    launch {folder}/
    wheels /tmp/tf-recipes-wheels

%post
    set -e
    if [ -f /mnt/ca-certificates.crt ]; then export PIP_CERT=/mnt/ca-certificates.crt; fi
    # The library from its wheel, then the recipe's requirements with the stack's pins, which the library
    # carries, but TensorFlow's: the base image's TensorFlow stays, and keeps its own pins (protobuf, numpy).
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --no-deps --no-index \\
        --find-links /tmp/tf-recipes-wheels tf-recipes
    python3 -m tf_recipes.operations.constraints {stack} > /tmp/stack.txt
    grep -v '^tensorflow==' /tmp/stack.txt > /tmp/stack-constraints.txt
    tensorflow="$(python3 -c 'import importlib.metadata as m; d = m.packages_distributions()["tensorflow"][0]; print(f"{{d}}=={{m.version(d)}}")')"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --no-cache-dir --find-links /tmp/tf-recipes-wheels \\
        -c /tmp/stack-constraints.txt -r {folder}/requirements.txt "$tensorflow"
    rm -rf /tmp/tf-recipes-wheels /tmp/stack.txt /tmp/stack-constraints.txt
"""  # noqa: E501 (the definition's lines are what the image build runs, as they stand)


def build_apptainer_exec_command(sif: str, inner_argv: Sequence[str], *, gpus: GpuSelection,
                                 env: Mapping[str, str], data_dir: str | None = None,
                                 results_dir: str | None = None, apptainer: str = "apptainer") -> list[str]:
    """`apptainer exec` with the same layout as `docker run`: code, /data (ro), /results.

    `--cleanenv` keeps the host's environment (module systems, conda, another PYTHONPATH) out of the
    container, as HPC sites expect; what the job needs goes in through `--env`. `--nv` only when
    GPUs are asked for. Apptainer has no `--gpus`: a count N or a device list becomes
    CUDA_VISIBLE_DEVICES (N means the first N, as `docker run --gpus N` does); "all" leaves it unset.
    """
    _require_value("sif", sif)
    kind, value = _parse_gpus(gpus)
    argv = [apptainer, "exec", "--cleanenv"]
    if kind != "none":
        argv.append("--nv")
    if data_dir:
        argv += ["--bind", f"{_host_path('--data-dir', data_dir)}:{CONTAINER_DATA_DIR}:ro"]
    if results_dir:
        argv += ["--bind", f"{_host_path('--results-dir', results_dir)}:{CONTAINER_RESULTS_DIR}"]
    visible = {"count": lambda n: list(range(n)), "devices": list}.get(kind)
    if visible is not None:
        argv += ["--env", "CUDA_VISIBLE_DEVICES=" + ",".join(str(d) for d in visible(value))]
    for key, val in env.items():
        argv += ["--env", f"{_require_key('environment variable', key)}={val}"]
    argv += ["--pwd", CONTAINER_WORKDIR, sif]
    argv += list(inner_argv)
    return argv


# ---------------------------------------------------------------------------------------------
# checks shared by the builders
# ---------------------------------------------------------------------------------------------

def _parse_gpus(gpus: GpuSelection) -> tuple[str, object]:
    """("none", None) | ("all", None) | ("count", N) | ("devices", [ids])."""
    if isinstance(gpus, bool):
        raise ValueError(f"gpus={gpus!r}: give 0, a count, 'all' or a list of device ids")
    if isinstance(gpus, str):
        text = gpus.strip()
        if text == "all":
            return "all", None
        if text.isdigit():
            return _parse_gpus(int(text))
        if text and all(part.strip().isdigit() for part in text.split(",")):
            return _parse_gpus([int(part) for part in text.split(",")])
        raise ValueError(f"gpus={gpus!r}: give 0, a count, 'all' or device ids like '0,1'")
    if isinstance(gpus, int):
        if gpus < 0:
            raise ValueError(f"gpus={gpus}: a GPU count cannot be negative; use 0 for CPU only")
        return ("none", None) if gpus == 0 else ("count", gpus)
    devices = list(gpus)
    if not devices or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices):
        raise ValueError(f"gpus={gpus!r}: a device list needs non-negative integer ids, like [0, 1]")
    if len(set(devices)) != len(devices):
        raise ValueError(f"gpus={gpus!r}: a device id appears twice")
    return "devices", devices


def _bind_mount(what: str, host_path: str, target: str, *, readonly: bool) -> str:
    spec = f"type=bind,source={_host_path(what, host_path)},target={target}"
    return spec + ",readonly" if readonly else spec


# What a host path in `docker run --mount` (comma-separated fields, read as CSV: a '"' opens a quoted
# field), `apptainer --bind SRC:DST:OPTS` and Pyxis' `--container-mounts SRC:DST,...` cannot hold.
MOUNT_SEPARATORS = (",", ":", '"', "\n", "\r")


def mount_path_problem(flag: str, path: str) -> str | None:
    """One line when `path` cannot be the source of a bind mount as it stands, else None."""
    bad = sorted({repr(c)[1:-1] for c in path if c in MOUNT_SEPARATORS})
    if bad:
        return (f"{flag} {path!r} contains {' and '.join(bad)}, which a bind mount's source cannot hold (Docker's "
                "--mount, Apptainer's --bind and Pyxis' --container-mounts split on them); use a path, or a "
                "symbolic link to it, without them")
    return None


def _host_path(what: str, path: str) -> str:
    if not posixpath.isabs(path):
        raise ValueError(f"{what} {path!r} is relative; bind mounts need an absolute path (resolve it first)")
    problem = mount_path_problem(what, path)
    if problem:
        raise ValueError(problem)
    return path


# What lists the images a Docker engine holds, one REPOSITORY:TAG a line (missing_image_problem reads it).
def build_local_images_command(docker: str = "docker") -> list[str]:
    return [docker, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]


def missing_image_problem(image: str, local_images, makers: Mapping[str, str]) -> str | None:
    """One line when a build or run needs `image` and it is not on this machine, before Docker is called;
    else None. `local_images` is what build_local_images_command printed, as a list (None: no Docker engine
    answered); `makers` maps the images that a task makes here (they are in no registry) to that task's
    command. An image no task makes is left to Docker, which pulls it."""
    if local_images is None:
        return (f"no Docker engine answers, and {image} is needed; start one (as root on Debian 12: "
                "bash ci/docker-engine.sh) and run again")
    tagged = image if _has_tag(image) else f"{image}:latest"
    if image in makers and tagged not in local_images and image not in local_images:
        return f"image {image} is not built; run `{makers[image]}` first"
    return None


def _has_tag(image: str) -> bool:
    last = image.rsplit("/", 1)[-1]
    return ":" in last or "@" in last


def _require_value(what: str, value: str) -> str:
    if not value or not str(value).strip():
        raise ValueError(f"{what} is empty; give a value")
    return value


def _require_image(what: str, image: str) -> str:
    _require_value(what, image)
    if any(c.isspace() for c in image) or image != image.strip():
        raise ValueError(f"{what} {image!r} contains whitespace; image names cannot")
    return image


def _require_key(what: str, key: str) -> str:
    if not key or "=" in key or any(c.isspace() for c in key):
        raise ValueError(f"{what} name {key!r} must be non-empty, without '=' or whitespace")
    return key
