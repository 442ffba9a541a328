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
        "base": "ngc (NVIDIA's TensorFlow 25.02 image) | cpu (images/cpu, built locally)",
        "runtime": "docker | apptainer (a .sif from the Docker image)",
        "definition": "with --runtime apptainer: build the .sif from a definition file rendered from the recipe "
                      "(BUILD/RECIPE_BASE.def), with no Docker engine, as on an HPC login node",
        "ca-bundle": "CA bundle for pip behind a TLS proxy (default: SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT)",
        "dry": "print the commands, run nothing",
    },
)
def build(c, recipe, base="ngc", runtime="docker", definition=False, ca_bundle=None, dry=False):
    """Build the image of RECIPE on the NGC or the CPU base image."""
    try:
        host.check_recipe(recipe, "build")
        launch.check_choice("base", base, contract.BASES)
        launch.check_choice("runtime", runtime, ("docker", "apptainer"))
    except launch.LaunchError as error:
        host.fail(str(error))
    if definition and runtime != "apptainer":
        host.fail("--definition builds an Apptainer image; add --runtime apptainer")
    cfg = host.settings(c)
    tag = host.image_tag(c, recipe, base)
    base_image = cfg["ngc_base"] if base == "ngc" else cfg["cpu_base"]
    if runtime == "apptainer":
        sif = host.sif_path(c, recipe, base)
        source = tag
        if definition:
            source = sif.removesuffix(".sif") + ".def"
            host.write_or_print(containers.render_apptainer_definition(base_image, recipe), source, dry,
                                "building the image from it")
        if not dry:
            os.makedirs(cfg["sif_dir"], exist_ok=True)
        code = host.execute(containers.build_apptainer_build_command(sif, source, apptainer=cfg["apptainer"]), dry=dry)
    else:
        argv, env = containers.build_docker_build_command(
            f"recipes/{recipe}/Dockerfile", ".", tag,
            build_args={"BASE_IMAGE": base_image, "GIT_REVISION": host.git_revision()},
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


@task(help={"base": "image to build on: debian (from images.bootstrap) | slim (python:3.11-slim-bookworm)",
            "ca-bundle": "CA bundle for pip behind a TLS proxy", "dry": "print the command, run nothing"})
def cpu(c, base="debian", ca_bundle=None, dry=False):
    """Build the CPU base image (TF 2.17.1, Keras >= 3.8, Horovod with Gloo and MPI)."""
    cfg = host.settings(c)
    try:
        launch.check_choice("base", base, ("debian", "slim"))
    except launch.LaunchError as error:
        host.fail(str(error))
    argv, env = containers.build_docker_build_command(
        "images/cpu/Dockerfile", "images/cpu", cfg["cpu_base"],
        build_args={"BASE_IMAGE": cfg["debian_base"] if base == "debian" else None},
        labels={"org.opencontainers.image.revision": host.git_revision()},
        ca_bundle=host.ca_bundle_from(ca_bundle), docker=host.docker_client(c))
    if host.execute(argv, env, dry):
        raise Exit(f"building {cfg['cpu_base']} failed", code=1)
