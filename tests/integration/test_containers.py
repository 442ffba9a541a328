"""Containers against a real Docker engine: the CPU base and the mnist-cnn image are built from
nothing (a debootstrap Debian, no registry); mnist-cnn trains *inside* the image under every
launcher in tests/integration/test_nightly_workflow.py (the nightly smoke tier), and the results land on
the host through the results volume.

Images are cached in the engine between runs: a second CI run rebuilds nothing (see
test_a_rebuild_without_changes_is_all_cache)."""
import hashlib
import os
import re
import struct
import zipfile

import pytest

from docker_images import BUILD_TIMEOUT, docker
from helpers import assert_ok, made_once, run_invoke

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def build_recipe(recipe):
    with made_once(f"image-{recipe}"):
        assert_ok(run_invoke("build", recipe, "--base", "cpu", timeout=BUILD_TIMEOUT))
    return f"tf-recipes/{recipe}:cpu"


@pytest.fixture(scope="module")
def mnist_image(cpu_base):
    return build_recipe("mnist-cnn")


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


HOROVOD_LIBRARY = "horovod/tensorflow/mpi_lib.cpython-311-x86_64-linux-gnu.so"
# In the image: the sha256 of the library Horovod loads into TensorFlow, and its two controllers.
IMAGE_HOROVOD = f"""import hashlib, os, horovod.tensorflow as hvd
path = os.path.join(os.path.dirname(hvd.__file__), "{HOROVOD_LIBRARY.rsplit('/', 1)[1]}")
print(hashlib.sha256(open(path, "rb").read()).hexdigest(), hvd.gloo_built(), hvd.mpi_built())"""


def elf_section_names(library: bytes) -> set[str]:
    """The section names of a 64-bit little-endian ELF file (its section header string table)."""
    shoff, = struct.unpack_from("<Q", library, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", library, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", library, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    return {library[names_at + name:library.index(b"\0", names_at + name)].decode() for name, *_ in headers}


def test_the_cpu_base_installs_the_horovod_wheel_compiled_here_not_a_second_build(cpu_base):
    """ci/test.sh sets INVOKE_TF_RECIPES_HOROVOD_WHEEL to the wheel ci/setup.sh --horovod compiled, and every
    images.cpu of the run installs it: the image's Horovod library is that wheel's, byte for byte, and has
    both controllers. ci/setup.sh compiles it without debug information (no .debug_* section)."""
    wheel_path = os.environ.get("INVOKE_TF_RECIPES_HOROVOD_WHEEL")
    if not wheel_path:
        message = "INVOKE_TF_RECIPES_HOROVOD_WHEEL is not set (ci/test.sh sets it after bash ci/setup.sh --horovod)"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)
    with zipfile.ZipFile(wheel_path) as wheel:
        library = wheel.read(HOROVOD_LIBRARY)
    expected = hashlib.sha256(library).hexdigest()
    sections = elf_section_names(library)
    assert ".text" in sections and not {name for name in sections if name.startswith(".debug")}, sorted(sections)
    process = docker("run", "--rm", "-e", "TF_CPP_MIN_LOG_LEVEL=3", cpu_base, "python", "-c", IMAGE_HOROVOD)
    assert process.returncode == 0, process.stderr[-2000:]
    assert process.stdout.split() == [expected, "True", "True"], process.stdout


def test_a_missing_image_says_which_command_builds_it(engine):
    process = run_invoke("run", "mnist-cnn", "--runtime", "docker", "--image", "tf-recipes/none:missing", env=engine)
    assert process.returncode == 2
    assert "is not built; run `invoke build mnist-cnn --stack ngc-25.02 --base cpu` first" in process.stderr
