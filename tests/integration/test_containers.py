"""Containers against a real Docker engine: the CPU base and the mnist-cnn image are built from
nothing (a debootstrap Debian, no registry), then mnist-cnn trains *inside* the image under every
launcher (tests/integration/test_nightly_workflow.py: the nightly smoke tier), and the results land on the host
through the results volume.

Images are cached in the engine between runs: a second CI run rebuilds nothing (see
test_a_rebuild_without_changes_is_all_cache)."""
import re

import pytest

from docker_images import BUILD_TIMEOUT, docker
from helpers import assert_ok, made_once, read_results, run_invoke, run_python

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def build_recipe(recipe):
    with made_once(f"image-{recipe}"):
        assert_ok(run_invoke("build", recipe, "--base", "cpu", timeout=BUILD_TIMEOUT))
    return f"tf-recipes/{recipe}:cpu"


@pytest.fixture(scope="module")
def mnist_image(cpu_base):
    return build_recipe("mnist-cnn")


RUNS = {
    "single": ["--launcher", "single"],
    "mirrored": ["--launcher", "mirrored", "--cpu-replicas", "2"],
    "multiworker": ["--launcher", "multiworker", "--cpu-replicas", "2"],
    "horovodrun": ["--launcher", "horovod", "--cpu-replicas", "2"],
    "mpirun": ["--launcher", "horovod", "--cpu-replicas", "2", "--horovod-runner", "mpirun"],
}


def test_a_rebuild_without_changes_is_all_cache(mnist_image):
    process = run_invoke("build", "mnist-cnn", "--base", "cpu", timeout=600)
    assert_ok(process)
    log = process.stdout + process.stderr
    steps = re.findall(r"^#(\d+) \[stage-\d+ \d+/\d+\] (?!FROM)", log, flags=re.M)
    assert steps, log[-3000:]
    for step in steps:
        assert re.search(rf"^#{step} CACHED$", log, flags=re.M), f"step #{step} ran again:\n{log[-3000:]}"


def test_recipe_layer_is_small_and_labelled(mnist_image):
    size = lambda image: int(docker("image", "inspect", "-f", "{{.Size}}", image).stdout)  # noqa: E731
    added = size(mnist_image) - size("tf-recipes/cpu-base:latest")
    assert 0 < added < 50 * 1024 * 1024, added
    labels = docker("image", "inspect", "-f", "{{json .Config.Labels}}", mnist_image).stdout
    assert '"org.tf-recipes.recipe":"mnist-cnn"' in labels
    assert '"org.opencontainers.image.base.name":"tf-recipes/cpu-base:latest"' in labels


def test_a_missing_image_says_which_command_builds_it(engine):
    process = run_invoke("run", "mnist-cnn", "--runtime", "docker", "--image", "tf-recipes/none:missing", env=engine)
    assert process.returncode == 2
    assert "is not built; run `invoke build mnist-cnn --stack ngc-25.02 --base cpu` first" in process.stderr


# -- cityscapes-unet: the generated fixture, prepared on the host, mounted read-only at /data ---------

@pytest.fixture(scope="module")
def cityscapes_image(cpu_base):
    return build_recipe("cityscapes-unet")


@pytest.fixture(scope="module")
def cityscapes_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("cityscapes-docker")
    recipe = "recipes/cityscapes-unet"
    assert_ok(run_python(f"{recipe}/make_fixture.py", "--out", str(root / "release"), "--zip", "--no-tree",
                         "--train", "8", "--val", "4"))
    assert_ok(run_python(f"{recipe}/prepare_data.py", "--source", str(root / "release"),
                         "--out", str(root / "prepared")))
    return root / "prepared"


# One launcher here; every cityscapes-unet launcher inside this image, held to the single-device
# cell's weights, runs in the nightly cpu tier (`invoke nightly --tier cpu`).
@pytest.mark.parametrize("name", ["multiworker"])
def test_cityscapes_trains_inside_the_container(cityscapes_image, cityscapes_data, engine, tmp_path, name):
    process = run_invoke("run", "cityscapes-unet", "--gpus", "0", *RUNS[name], "--runtime", "docker",
                         "--data-dir", str(cityscapes_data), "--results-dir", str(tmp_path), "--",
                         "--preset", "tiny", "--max-steps", "6", "--log-every", "3", env=engine)
    assert_ok(process)
    assert f"source={cityscapes_data},target=/data,readonly" in process.stdout
    results = read_results(tmp_path)
    assert results["recipe"] == "cityscapes-unet" and results["replicas"] == 2
    assert len(set(results["replica_fingerprints"])) == 1
    assert results["final_metrics"]["val"]["examples"] == 4


# -- cassava-resnet: a generated, prepared TFDS directory mounted read-only at /data -----------------

@pytest.fixture(scope="module")
def cassava_image(cpu_base):
    return build_recipe("cassava-resnet")


@pytest.fixture(scope="module")
def cassava_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("cassava-docker")
    assert_ok(run_python("recipes/cassava-resnet/generated_cassava.py", str(root), "--train", "16",
                         "--validation", "8", "--test", "8"))
    return root


# One launcher here: the image's launchers are proven by the mnist-cnn smoke night, and every
# cassava-resnet launcher inside this image by the nightly cpu tier (`invoke nightly --tier cpu`).
@pytest.mark.parametrize("name", ["multiworker"])
def test_cassava_trains_inside_the_container(cassava_image, cassava_data, engine, tmp_path, name):
    process = run_invoke("run", "cassava-resnet", "--gpus", "0", *RUNS[name], "--runtime", "docker",
                         "--data-dir", str(cassava_data), "--results-dir", str(tmp_path), "--",
                         "--max-steps", "3", "--weights", "none", "--image-size", "64", "--batch-size", "2",
                         "--log-every", "1", env=engine)
    assert_ok(process)
    results = read_results(tmp_path)
    assert results["recipe"] == "cassava-resnet" and results["replicas"] == 2
    assert len(set(results["replica_fingerprints"])) == 1
    assert results["final_metrics"]["validation"]["examples"] == 8
