"""`invoke build` and `invoke images.*`: the recipe images and the base images they build on."""
from __future__ import annotations

import os
import shlex
import shutil

from invoke import Exit, task

from commands import containers, launch
from common import contract
from tasks import host


@task(
    positional=["recipe"],
    auto_shortflags=False,
    help={
        "recipe": "recipe folder name under recipes/",
        "stack": "ngc-25.02 (TF 2.17, every launcher) | current (the newest TF; no horovod): stacks/NAME.txt",
        "base": "ngc-25.02: ngc (NVIDIA's TensorFlow 25.02 image) | cpu (images/cpu); current: gpu "
                "(tensorflow/tensorflow:X-gpu) | cpu (images/cpu-current). Default: the stack's GPU base",
        "runtime": "docker | apptainer (a .sif from the Docker image)",
        "definition": "with --runtime apptainer: build the .sif from a definition file rendered from the recipe "
                      "(BUILD/RECIPE_BASE.def), with no Docker engine, as on an HPC login node",
        "ca-bundle": "CA bundle for pip behind a TLS proxy (default: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT)",
        "dry": "print the commands, run nothing",
    },
)
def build(c, recipe, stack=contract.DEFAULT_STACK, base=None, runtime="docker", definition=False, ca_bundle=None,
          dry=False):
    """Build the image of RECIPE for a stack, on its GPU or its CPU base image."""
    try:
        host.check_recipe(recipe, "build")
        base = base or contract.STACK_BASES.get(stack, ("ngc",))[0]
        launch.check_choice("base", base, contract.BASES)
        host.check_stack(stack, base)
        launch.check_choice("runtime", runtime, ("docker", "apptainer"))
    except launch.LaunchError as error:
        host.fail(str(error))
    if definition and runtime != "apptainer":
        host.fail("--definition builds an Apptainer image; add --runtime apptainer")
    cfg = host.settings(c)
    tag = host.image_tag(c, recipe, base, stack)
    base_image = host.base_image(c, stack, base)
    if runtime == "apptainer":
        sif = host.sif_path(c, recipe, base, stack)
        source = tag
        if definition:
            source = sif.removesuffix(".sif") + ".def"
            host.write_or_print(containers.render_apptainer_definition(base_image, recipe, stack), source, dry,
                                "building the image from it")
        if not dry:
            os.makedirs(cfg["sif_dir"], exist_ok=True)
        code = host.execute(containers.build_apptainer_build_command(sif, source, apptainer=cfg["apptainer"]), dry=dry)
    else:
        argv, env = containers.build_docker_build_command(
            f"recipes/{recipe}/Dockerfile", ".", tag,
            build_args={"BASE_IMAGE": base_image, "STACK": stack, "GIT_REVISION": host.git_revision()},
            labels={}, ca_bundle=host.ca_bundle_from(ca_bundle), docker=host.docker_client(c))
        code = host.execute(argv, env, dry)
    if code:
        raise Exit(f"building {tag} failed with status {code}", code=code)


@task(help={"rootfs": "folder for the Debian root file system", "dry": "print the commands, run nothing"})
def bootstrap(c, rootfs="build/debian-rootfs", dry=False):
    """Make a Debian bookworm base image with debootstrap, for machines that reach no registry."""
    cfg = host.settings(c)
    rootfs = os.path.abspath(rootfs)  # debootstrap changes directory: a relative path would break
    if not dry:
        shutil.rmtree(rootfs, ignore_errors=True)
        os.makedirs(os.path.dirname(rootfs), exist_ok=True)
    tarball = rootfs + ".tar"
    for argv in containers.build_debian_base_commands(rootfs, tarball, cfg["debian_base"], docker=host.docker_client(c)):
        if host.execute(argv, dry=dry):
            raise Exit(f"making {cfg['debian_base']} failed at: {shlex.join(argv)}", code=1)
    if not dry:  # the image holds it now; the ~200 MB tree and the ~120 MB tarball are not needed
        shutil.rmtree(rootfs, ignore_errors=True)
        os.remove(tarball)


# The CPU base image of each stack: its Dockerfile (built from the repository root, for stacks/).
CPU_DOCKERFILES = {"ngc-25.02": "images/cpu/Dockerfile", "current": "images/cpu-current/Dockerfile"}


@task(help={"stack": "ngc-25.02 (images/cpu: TF 2.17.1, Horovod with Gloo and MPI) | current (images/cpu-current: "
                     "the newest TF, no Horovod)",
            "base": "image to build on: debian (from images.bootstrap) | slim (python:3.11-slim-bookworm)",
            "ca-bundle": "CA bundle for pip behind a TLS proxy", "dry": "print the command, run nothing"})
def cpu(c, stack=contract.DEFAULT_STACK, base="debian", ca_bundle=None, dry=False):
    """Build a stack's CPU base image (ngc-25.02: TF 2.17.1, Keras >= 3.8, Horovod with Gloo and MPI)."""
    try:
        host.check_stack(stack)
        launch.check_choice("base", base, ("debian", "slim"))
    except launch.LaunchError as error:
        host.fail(str(error))
    cfg = host.settings(c)
    tag = host.base_image(c, stack, "cpu")
    argv, env = containers.build_docker_build_command(
        CPU_DOCKERFILES[stack], ".", tag,
        build_args={"BASE_IMAGE": cfg["debian_base"] if base == "debian" else None},
        labels={"org.opencontainers.image.revision": host.git_revision(), "org.tf-recipes.stack": stack},
        ca_bundle=host.ca_bundle_from(ca_bundle), docker=host.docker_client(c))
    if host.execute(argv, env, dry):
        raise Exit(f"building {tag} failed", code=1)
