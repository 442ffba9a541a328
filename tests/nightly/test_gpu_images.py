"""The current stack's GPU image carries the CUDA libraries its TensorFlow was built for; the image it
replaces did not. Checked without a GPU by tools/gpu_libraries.py (see its docstring), in Docker and in
the SIF under `apptainer exec --nv`.

- `invoke images.gpu` builds images/current's gpu target, and the build itself runs the check: a build that
  succeeds has passed it. The check then runs again in the image and in the mnist-cnn SIF made from it.
- tests/nightly/images/upstream-tensorflow-gpu.Dockerfile rebuilds tensorflow/tensorflow:2.21.0-gpu as
  its upstream recipe describes (that image cannot be pulled here); the check must fail there, naming
  cuDNN 9.

Not in the per-push suite (pyproject.toml's testpaths leave tests/nightly out): the two images
download about 4.9 GB of wheels and hold 10.7 GB, and the module takes minutes even with them cached
(docs/containers.md gives the measured figures); the suite is already at its 40-minute budget. The
nightly's `gpu-images` job runs it: `bash ci/test.sh --gpu-images`.
"""
import os
import re
import shutil
import subprocess

import pytest
from invoke import Config, Context

from commands import containers
from helpers import REPO, assert_ok, made_once, run_invoke
from tasks import host

BUILD_TIMEOUT = 3600


def setting(key: str) -> str:
    """An image name as invoke sees it: tasks.host's default, or INVOKE_TF_RECIPES_KEY."""
    return os.environ.get(f"INVOKE_TF_RECIPES_{key.upper()}", host.DEFAULTS[key])


UPSTREAM = f"{setting('image_prefix')}/upstream-tensorflow-gpu:2.21.0"
GPU_BASE = setting("current_gpu_base")
CHECK = "/tmp/gpu_libraries.py"  # where the check is bind-mounted into an image that lacks it
LIBRARIES = ("cudart", "cublas", "cublasLt", "cudnn", "cufft", "curand", "cusolver", "cusparse", "nvjitlink",
             "nccl")


def docker(*args, **kwargs):
    return subprocess.run(["docker", *args], capture_output=True, text=True, **kwargs)


def check_in(image: str) -> subprocess.CompletedProcess:
    mount = f"type=bind,source={REPO / 'tools' / 'gpu_libraries.py'},target={CHECK},readonly"
    return docker("run", "--rm", "--mount", mount, image, "python", CHECK, timeout=300)


@pytest.fixture(scope="module")
def debian_base():
    if docker("info").returncode != 0:
        pytest.fail("no Docker engine answers: run `bash ci/docker-engine.sh` (as root)")
    with made_once("debian-base"):
        if docker("image", "inspect", setting("debian_base")).returncode != 0:
            assert_ok(run_invoke("images.bootstrap", timeout=BUILD_TIMEOUT))
    return setting("debian_base")


@pytest.fixture(scope="module")
def gpu_base(debian_base):
    process = run_invoke("images.gpu", timeout=BUILD_TIMEOUT)
    assert_ok(process)
    return process


def test_the_check_fails_on_a_reconstruction_of_tensorflows_own_gpu_image(debian_base):
    argv, env = containers.build_docker_build_command(
        "tests/nightly/images/upstream-tensorflow-gpu.Dockerfile", ".", UPSTREAM, {"BASE_IMAGE": debian_base}, {},
        host.ca_bundle_from(None), docker=host.docker_client(Context(Config(overrides={"tf_recipes": host.DEFAULTS}))))
    built = subprocess.run(argv, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT)
    assert built.returncode == 0, built.stderr[-3000:]
    process = check_in(UPSTREAM)
    print(process.stdout)
    assert process.returncode == 1, process.stdout + process.stderr
    assert "built with CUDA 12.5.1, cuDNN 9" in process.stdout
    assert "FAIL cudnn: libcudnn.so.9 does not load" in process.stdout and "libcudnn.so.8" in process.stdout
    assert process.stdout.rstrip().splitlines()[-1].startswith("FAIL: ")


def test_the_gpu_image_passes_the_check_in_its_build_and_when_run(gpu_base):
    # The check's build step ran and passed, now or in an earlier build of the same step (BuildKit's
    # cache key includes the bind-mounted tools/gpu_libraries.py, so a changed check runs again).
    log = gpu_base.stdout + gpu_base.stderr
    step = re.search(r"^#(\d+) \[gpu \d+/\d+\] RUN --mount=type=bind,source=tools/gpu_libraries.py", log, flags=re.M)
    assert step, log[-3000:]
    assert f"#{step.group(1)} CACHED" in log or "PASS: every CUDA library TensorFlow loads on a GPU" in log, log[-3000:]
    process = check_in(GPU_BASE)
    print(process.stdout)
    assert process.returncode == 0, process.stdout + process.stderr
    for name in LIBRARIES:
        assert any(line.startswith(f"ok   {name}: ") for line in process.stdout.splitlines()), name


def test_the_check_passes_in_the_sif_under_apptainer_nv(gpu_base):
    found = shutil.which("apptainer")
    if not found or subprocess.run([found, "version"], capture_output=True).returncode != 0:
        pytest.fail("apptainer does not run: run `bash ci/apptainer.sh` (as root)")
    assert_ok(run_invoke("build", "mnist-cnn", "--stack", "current", "--runtime", "apptainer",
                         "--sif-compression", "zstd", timeout=BUILD_TIMEOUT))
    sif = str(REPO / "build" / "sif" / "mnist-cnn_current-gpu.sif")
    argv = containers.build_apptainer_exec_command(sif, ["python", "tools/gpu_libraries.py"], gpus="all", env={},
                                                   apptainer=found)
    assert "--nv" in argv
    process = subprocess.run(argv, cwd="/tmp", capture_output=True, text=True, timeout=600)
    print(process.stdout, process.stderr)
    assert process.returncode == 0, process.stdout + process.stderr
    assert "PASS: every CUDA library TensorFlow loads on a GPU" in process.stdout
