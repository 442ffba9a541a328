"""`invoke build` and `invoke images.*`: the recipe images and the base images they build on."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile

from invoke import Exit, task

from commands import choices, containers, launch
from tf_recipes import contract, user_paths
from tasks import host

# How a message names the folder SIFs go to: a setting, not a flag.
SIF_FOLDER = "the SIF folder (setting sif_dir, INVOKE_TF_RECIPES_SIF_DIR)"


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "stack": "ngc-25.02 (TF 2.17, every launcher) | current (the newest TF; no horovod): stacks/NAME.txt",
        "base": "ngc-25.02: ngc (NVIDIA's TensorFlow 25.02 image) | cpu (images/cpu); current: gpu "
                "(images/current, target gpu) | cpu (images/current, target cpu). Default: the stack's GPU base",
        "runtime": "docker | apptainer (the Docker image, then a .sif made from it with docker save; rebuilt only "
                   "when the image changed)",
        "definition": "with --runtime apptainer: build the .sif from a definition file rendered from the recipe "
                      "(BUILD/RECIPE_BASE.def), with no Docker engine, as on an HPC login node",
        "sif-compression": "with --runtime apptainer: gzip (Apptainer's default, mounted everywhere) | zstd (about 3x "
                           "faster to build; needs zstd support where the SIF is mounted)",
        "ca-bundle": "CA bundle for pip behind a TLS proxy (default: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT)",
        "dry": "print the commands, run nothing",
    },
)
def build(c, recipe, stack=contract.DEFAULT_STACK, base=None, runtime="docker", definition=False, ca_bundle=None,
          sif_compression="gzip", dry=False):
    """Build the image of RECIPE for a stack, on its GPU or its CPU base image."""
    try:
        host.check_recipe(recipe, "build")
        base = base or choices.STACK_BASES.get(stack, ("ngc",))[0]
        launch.check_choice("base", base, choices.BASES)
        host.check_stack(stack, base)
        launch.check_choice("runtime", runtime, ("docker", "apptainer"))
        launch.check_choice("sif-compression", sif_compression, tuple(containers.SIF_COMPRESSION_ARGS))
    except launch.LaunchError as error:
        host.fail(str(error))
    if definition and runtime != "apptainer":
        host.fail("--definition builds an Apptainer image; add --runtime apptainer")
    cfg = host.settings(c)
    if runtime == "apptainer":  # before Docker or Apptainer is called
        host.check_creatable(SIF_FOLDER, os.path.join(host.ROOT, cfg["sif_dir"]), dry)
    tag = host.image_tag(c, recipe, base, stack)
    base_image = host.base_image(c, stack, base)
    if runtime == "apptainer" and definition:
        library_wheel(recipe, dry)
        sif = host.sif_path(c, recipe, base, stack)
        source = sif.removesuffix(".sif") + ".def"
        host.write_or_print(containers.render_apptainer_definition(base_image, recipe, stack), source, dry,
                            "building the image from it", flag="the definition file")
        if not dry:
            host.make_folder(SIF_FOLDER, cfg["sif_dir"])
        code = host.execute(containers.build_apptainer_build_command(  # %files are relative to the recipe folder
            os.path.abspath(sif), os.path.abspath(source), apptainer=cfg["apptainer"], compression=sif_compression),
            dry=dry, cwd=os.path.join(host.ROOT, "recipes", recipe))
        if code:
            raise Exit(f"building {sif} failed with status {code}", code=code)
        return
    docker = host.docker_client(c)
    try:
        if runtime == "apptainer":  # the SIF's commands, checked before the image is built
            sif = os.path.join(host.ROOT, host.sif_path(c, recipe, base, stack))
            containers.build_sif_from_image_commands(tag, sif, os.path.join(os.path.dirname(sif), "image.tar"))
        argv, env = containers.build_docker_build_command(
            f"recipes/{recipe}/Dockerfile", f"recipes/{recipe}", tag,
            build_args={"BASE_IMAGE": base_image, "STACK": stack, "GIT_REVISION": host.git_revision()},
            labels={}, ca_bundle=host.ca_bundle_from(ca_bundle), docker=docker)
    except ValueError as error:  # a value `docker build` cannot take, such as a CA bundle path with a comma
        host.fail(str(error))
    if not dry:
        host.require_image(docker, base_image, image_makers(c))
    library_wheel(recipe, dry)
    code = host.execute(argv, env, dry)
    if code:
        raise Exit(f"building {tag} failed with status {code}", code=code)
    if runtime == "apptainer":
        sif_from_image(c, tag, host.sif_path(c, recipe, base, stack), sif_compression, docker, dry)


def library_wheel(recipe: str, dry: bool) -> None:
    """The library's wheel in recipes/RECIPE/wheels/ (gitignored), which the recipe's Dockerfile installs;
    the folder's earlier tf-recipes wheels are removed first. Built from a fresh copy of the library's
    sources (containers.LIBRARY_SOURCES), so that nothing an earlier build left (setuptools' build/) gets
    in, and two builds at once never share a build folder."""
    import setuptools  # what builds the wheel (no build isolation, so nothing is downloaded)

    wheels = os.path.join(host.ROOT, "recipes", recipe, containers.WHEELS_DIR)
    if int(setuptools.__version__.split(".")[0]) < 77:
        host.fail(f"setuptools {setuptools.__version__} cannot build the tf-recipes wheel (pyproject.toml needs 77 "
                  "or later); run bash ci/setup.sh, or pip install 'setuptools>=77'")
    if dry:
        host.show(*containers.build_library_wheel_command("COPY_OF_THE_LIBRARY", wheels, sys.executable))
        return
    host.make_folder("the wheel folder", wheels)
    for name in os.listdir(wheels):
        if name.startswith("tf_recipes-") and name.endswith(".whl"):
            os.remove(os.path.join(wheels, name))
    with tempfile.TemporaryDirectory(prefix="tf-recipes-wheel.") as work:
        source = os.path.join(work, "tf-recipes")
        os.makedirs(source)
        for name in containers.LIBRARY_SOURCES:
            path = os.path.join(host.ROOT, name)
            if os.path.isdir(path):
                shutil.copytree(path, os.path.join(source, name), ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, source)
        argv, env = containers.build_library_wheel_command(source, wheels, sys.executable)
        code = host.execute(argv, env=env)
    if code:
        raise Exit(f"building the tf-recipes wheel into {wheels} failed with status {code}", code=code)


def sif_from_image(c, image: str, sif: str, compression: str, docker: str, dry: bool) -> None:
    """`image` as the SIF file `sif`, unless `sif` was already made from the same image (its id, in
    SIF.json beside it) with the same compression. The SIF is built under a temporary name beside it,
    with the `docker save` tarball, and renamed into place when whole; that folder is always deleted."""
    sif = os.path.join(host.ROOT, sif)  # the commands run from the repository root
    shown = os.path.relpath(sif, host.ROOT) if sif.startswith(host.ROOT + os.sep) else sif
    stamp_path = sif + ".json"
    apptainer = host.settings(c)["apptainer"]
    if dry:
        work = os.path.join(os.path.dirname(sif), f".{os.path.basename(sif)}.XXXXXX")
        for argv in containers.build_sif_from_image_commands(image, os.path.join(work, "image.sif"),
                                                             os.path.join(work, "image.tar"), compression=compression,
                                                             docker=docker, apptainer=apptainer):
            host.show(argv)
        print(f"+ mv {work}/image.sif {sif}")
        return
    stamp = {"image": image, "image_id": docker_image_id(docker, image), "compression": compression}
    if os.path.isfile(sif) and read_json(stamp_path) == stamp:
        print(f"{shown} is up to date: made from {image} ({stamp['image_id'][:19]}), "
              f"{compression}; nothing to build")
        return
    host.make_folder(SIF_FOLDER, os.path.dirname(sif))
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(sif)}.", dir=os.path.dirname(sif))
    try:
        built = os.path.join(work, "image.sif")
        for argv in containers.build_sif_from_image_commands(image, built, os.path.join(work, "image.tar"),
                                                             compression=compression, docker=docker,
                                                             apptainer=apptainer):
            code = host.execute(argv)
            if code:
                raise Exit(f"making {shown} from {image} failed at `{argv[0]} "
                           f"{argv[1]}` with status {code}", code=code)
        os.replace(built, sif)
        host.write_atomically(stamp_path, json.dumps(stamp, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {shown} ({os.path.getsize(sif) / 1e6:,.0f} MB) from {image} "
          f"({stamp['image_id'][:19]}), {compression}")


def docker_image_id(docker: str, image: str) -> str:
    """The image's id (sha256:...): what a SIF made from it is keyed on."""
    inspected = subprocess.run([docker, "image", "inspect", "-f", "{{.Id}}", image], capture_output=True, text=True)
    if inspected.returncode != 0 or not inspected.stdout.strip():
        host.fail(f"cannot read the id of image {image}: {(inspected.stderr.strip() or 'no output').splitlines()[-1]}")
    return inspected.stdout.strip()


def read_json(path: str):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


@task(help={"rootfs": "a new or empty folder for the Debian root file system (or one an earlier run made); "
                      "ROOTFS.tar is packed beside it; both are deleted after the import",
            "dry": "print the commands, run nothing"})
def bootstrap(c, rootfs="build/debian-rootfs", dry=False):
    """Make a Debian bookworm base image with debootstrap, for machines that reach no registry."""
    cfg = host.settings(c)
    given, rootfs = rootfs, checked_rootfs(rootfs, dry)  # absolute: debootstrap changes directory
    tarball = rootfs + ".tar"
    if os.path.lexists(tarball):
        host.fail(f"{tarball} exists, and images.bootstrap packs --rootfs {given} there; move it away or "
                  "give another --rootfs")
    try:
        commands = containers.build_debian_base_commands(rootfs, tarball, cfg["debian_base"],
                                                         docker=host.docker_client(c))
    except ValueError as error:
        host.fail(str(error))
    folder_is_ours = made_the_folder(rootfs)
    if not dry:
        fresh_rootfs(rootfs, folder_is_ours)
    try:
        for argv in commands:
            if host.execute(argv, dry=dry):
                raise Exit(f"making {cfg['debian_base']} failed at: {shlex.join(argv)}", code=1)
    finally:
        if not dry and os.path.exists(tarball):  # this run's, whole or cut short: it was not there before
            os.remove(tarball)
    if not dry:  # the image holds it now; the ~200 MB tree is not needed
        delete_contents(rootfs, marker=True)
        if folder_is_ours:
            os.rmdir(rootfs)


def checked_rootfs(rootfs: str, dry: bool = False) -> str:
    """--rootfs as an absolute path, once it is a folder this task may fill and later delete: a new
    one, an empty one, or one an earlier run made (it holds ROOTFS_MARKER). Else one line, exit 2."""
    example = "give a new folder, e.g. --rootfs build/debian-rootfs"
    if not rootfs.strip():
        host.fail(f"--rootfs is empty; {example}")
    path = os.path.realpath(rootfs)
    if path == os.path.dirname(path):
        host.fail(f"--rootfs {rootfs} is the root directory; {example}")
    for what, kept in (("the repository", host.ROOT), ("your home folder", os.path.expanduser("~"))):
        kept = os.path.realpath(kept)
        if os.path.commonpath([path, kept]) == path:
            host.fail(f"--rootfs {rootfs} is {what} ({kept}) or a folder above it; {example}")
    if os.path.lexists(path) and not os.path.isdir(path):
        host.fail(f"--rootfs {rootfs} is a file, not a folder; {example}")
    host.check_creatable("--rootfs", rootfs, dry)
    try:
        foreign = os.path.isdir(path) and os.listdir(path) and not os.path.isfile(
            os.path.join(path, containers.ROOTFS_MARKER))
    except OSError as error:
        host.fail(f"--rootfs {rootfs} cannot be read ({error.strerror}); {example}")
    if foreign:
        host.fail(f"--rootfs {rootfs} is not empty and holds no {containers.ROOTFS_MARKER}, so images.bootstrap "
                  "did not make it and will not delete it; give a new or empty folder (or delete this one yourself)")
    return path


# What the marker says: whether the task made the folder itself (and so deletes it), or was given it empty
# (and so deletes only what it put in it).
MARKER_TEXT = {True: "A Debian root file system that `invoke images.bootstrap` made, in a folder it made; "
                     "it deletes the folder when it runs again.\n",
               False: "A Debian root file system that `invoke images.bootstrap` made, in a folder that was "
                      "there, empty; it deletes what the folder holds when it runs again.\n"}


def made_the_folder(path: str) -> bool:
    """Whether the --rootfs folder is this task's: missing now, or made by an earlier run (its marker says so)."""
    try:
        with open(os.path.join(path, containers.ROOTFS_MARKER)) as handle:
            return handle.read() == MARKER_TEXT[True]
    except FileNotFoundError:
        return not os.path.isdir(path)


def fresh_rootfs(path: str, folder_is_ours: bool) -> None:
    """`path` empty but for the marker: made if missing, else emptied (checked_rootfs allowed it)."""
    if os.path.isdir(path):
        delete_contents(path, marker=False)
    else:
        os.makedirs(path)
    with open(os.path.join(path, containers.ROOTFS_MARKER), "w") as handle:
        handle.write(MARKER_TEXT[folder_is_ours])


def delete_contents(path: str, *, marker: bool) -> None:
    """Everything in `path`, the marker only with marker=True and last, so a folder cut short stays marked."""
    marker_path = os.path.join(path, containers.ROOTFS_MARKER)
    for entry in os.scandir(path):
        if entry.path == marker_path:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.remove(entry.path)
    if marker and os.path.lexists(marker_path):
        os.remove(marker_path)


# The base images built here, by stack and kind: (Dockerfile, its --target, build arguments). Each stack
# has a CPU base; the current stack also a GPU base (the ngc-25.02 stack's is NVIDIA's image). Built from
# the repository root, for stacks/ and tools/.
BASE_DOCKERFILES = {
    ("ngc-25.02", "cpu"): ("images/cpu/Dockerfile", None, {}),
    ("current", "cpu"): ("images/current/Dockerfile", "cpu", {}),
    ("current", "gpu"): ("images/current/Dockerfile", "gpu", {"TENSORFLOW": "tensorflow[and-cuda]"}),
}


def image_makers(c) -> dict:
    """The images a task here makes (no registry has them), each to the command that makes it: the stacks'
    bases (BASE_DOCKERFILES) and the Debian base they build on."""
    makers = {host.base_image(c, stack, kind): f"invoke images.{kind} --stack {stack}"
              for stack, kind in BASE_DOCKERFILES}
    return {**makers, host.settings(c)["debian_base"]: "invoke images.bootstrap"}


CPU_DOCKERFILES = {stack: dockerfile for (stack, kind), (dockerfile, _, _) in BASE_DOCKERFILES.items() if kind == "cpu"}


@task(help={"stack": "ngc-25.02 (images/cpu: TF 2.17.1, Horovod with Gloo and MPI) | current (images/current, target "
                     "cpu: the newest TF, tensorflow-cpu, no Horovod)",
            "base": "image to build on: debian (from images.bootstrap) | slim (python:3.11-slim-bookworm)",
            "horovod-wheel": "ngc-25.02: install this Horovod 0.28.1 wheel instead of compiling Horovod (one that "
                             "bash ci/setup.sh --horovod built on Debian 12 with Python 3.11 and tensorflow-cpu; "
                             "bash ci/setup.sh --print-horovod-wheel names it). Default: the setting "
                             "horovod_wheel (INVOKE_TF_RECIPES_HOROVOD_WHEEL), else compile",
            "ca-bundle": "CA bundle for pip behind a TLS proxy", "dry": "print the command, run nothing"})
def cpu(c, stack=contract.DEFAULT_STACK, base="debian", horovod_wheel=None, ca_bundle=None, dry=False):
    """Build a stack's CPU base image (ngc-25.02: TF 2.17.1, Keras >= 3.8, Horovod with Gloo and MPI)."""
    named = "--horovod-wheel"
    if horovod_wheel is None and host.settings(c)["horovod_wheel"] and stack == contract.DEFAULT_STACK:
        horovod_wheel = host.settings(c)["horovod_wheel"]  # a setting: the current stack has no Horovod
        named = HOROVOD_WHEEL_SETTING
    build_base_image(c, stack, "cpu", base, ca_bundle, dry, horovod_wheel=horovod_wheel, horovod_wheel_from=named)


# Where `invoke images.cpu --horovod-wheel` puts the wheel, in the base images' build context
# (.dockerignore lets it in); images/cpu/Dockerfile installs it with HOROVOD=wheel.
HOROVOD_WHEEL_DIR = os.path.join("build", "horovod-wheel")
# The wheel images/cpu/Dockerfile can install: Horovod 0.28.1 for the image's Python, 3.11.
HOROVOD_WHEEL_NAME = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
HOROVOD_WHEEL_SETTING = "the setting horovod_wheel (INVOKE_TF_RECIPES_HOROVOD_WHEEL)"


def checked_horovod_wheel(path: str, stack: str, named: str = "--horovod-wheel") -> str:
    """The wheel (given as `named`: the flag or the setting) as an absolute path, once it is one the CPU base
    can install; else one line, exit 2."""
    if stack != contract.DEFAULT_STACK:
        host.fail(f"{named}: the {stack} stack's CPU base has no Horovod; drop it, or use "
                  f"--stack {contract.DEFAULT_STACK}")
    what = user_paths.what_is(path)
    if what != user_paths.FILE:
        host.fail(f"{named} {path} {'does not exist' if what == user_paths.MISSING else 'is ' + what}; "
                  "give the wheel bash ci/setup.sh --horovod built (bash ci/setup.sh --print-horovod-wheel names it)")
    if os.path.basename(path) != HOROVOD_WHEEL_NAME:
        host.fail(f"{named} {path} is not {HOROVOD_WHEEL_NAME}, the Horovod the CPU base installs for its "
                  "Python 3.11; give that wheel, or drop it to compile Horovod in the image")
    if not zipfile.is_zipfile(path):
        host.fail(f"{named} {path} is not a wheel (not a zip file); build it again with bash ci/setup.sh "
                  "--horovod, or drop it to compile Horovod in the image")
    return os.path.abspath(path)


def place_horovod_wheel(wheel: str, dry: bool) -> None:
    """The wheel copied into HOROVOD_WHEEL_DIR, whose earlier Horovod wheels are removed first."""
    folder = os.path.join(host.ROOT, HOROVOD_WHEEL_DIR)
    target = os.path.join(folder, HOROVOD_WHEEL_NAME)
    print(f"+ cp {shlex.quote(wheel)} {shlex.quote(os.path.relpath(target, host.ROOT))}", flush=True)
    if dry or os.path.realpath(wheel) == os.path.realpath(target):
        return
    host.make_folder("the Horovod wheel folder", folder)
    for name in os.listdir(folder):
        if name.startswith("horovod-") and name.endswith(".whl"):
            os.remove(os.path.join(folder, name))
    shutil.copy2(wheel, target)


@task(help={"stack": "current (images/current, target gpu: TensorFlow with the CUDA wheels it was built for); "
                     "ngc-25.02's GPU base is NVIDIA's image, not built here",
            "base": "image to build on: debian (from images.bootstrap) | slim (python:3.11-slim-bookworm)",
            "ca-bundle": "CA bundle for pip behind a TLS proxy", "dry": "print the command, run nothing"})
def gpu(c, stack="current", base="debian", ca_bundle=None, dry=False):
    """Build the current stack's GPU base image; the build fails unless its CUDA libraries match its TensorFlow."""
    build_base_image(c, stack, "gpu", base, ca_bundle, dry)


def build_base_image(c, stack: str, kind: str, base: str, ca_bundle: str | None, dry: bool,
                     horovod_wheel: str | None = None, horovod_wheel_from: str = "--horovod-wheel") -> None:
    """`docker build` of a stack's `kind` (cpu or gpu) base image (BASE_DOCKERFILES), with Horovod from
    `horovod_wheel` (the CPU base of ngc-25.02) when it is given."""
    try:
        host.check_stack(stack)
        launch.check_choice("base", base, ("debian", "slim"))
    except launch.LaunchError as error:
        host.fail(str(error))
    if horovod_wheel is not None:
        horovod_wheel = checked_horovod_wheel(horovod_wheel, stack, horovod_wheel_from)
    if (stack, kind) not in BASE_DOCKERFILES:
        built = " or ".join(s for s, k in BASE_DOCKERFILES if k == kind)
        host.fail(f"the {stack} stack's {kind} base is {host.base_image(c, stack, choices.STACK_BASES[stack][0])}, "
                  f"which is pulled, not built here; --stack {built} has one to build")
    dockerfile, target, build_args = BASE_DOCKERFILES[stack, kind]
    cfg = host.settings(c)
    tag = host.base_image(c, stack, kind)
    docker = host.docker_client(c)
    try:
        argv, env = containers.build_docker_build_command(
            dockerfile, ".", tag,
            build_args={"BASE_IMAGE": cfg["debian_base"] if base == "debian" else None, **build_args,
                        **({"HOROVOD": "wheel"} if horovod_wheel else {})},
            labels={"org.opencontainers.image.revision": host.git_revision(), "org.tf-recipes.stack": stack},
            ca_bundle=host.ca_bundle_from(ca_bundle), docker=docker, target=target)
    except ValueError as error:
        host.fail(str(error))
    if not dry and base == "debian":
        host.require_image(docker, cfg["debian_base"], image_makers(c))
    if horovod_wheel:
        place_horovod_wheel(horovod_wheel, dry)
    if host.execute(argv, env, dry):
        raise Exit(f"building {tag} failed", code=1)
