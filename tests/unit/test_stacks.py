"""The two stacks: each is one constraints file (stacks/NAME.txt) that pip can install with the library's
declared ranges; which stack ci/setup.sh picks for a Python, and what it refuses; the images and runs invoke
makes for each stack; and how ci/setup.sh builds Horovod (its wheel, its compiler, its cmake flags)."""
import re
import shutil
import subprocess

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from commands import choices
from tf_recipes import contract
from helpers import REPO, run_invoke

STACK_FILES = {path.stem: path for path in (REPO / "stacks").glob("*.txt")}


def pins(stack: str) -> dict:
    lines = (line.split("#")[0].strip() for line in STACK_FILES[stack].read_text().splitlines())
    return {Requirement(line).name: Requirement(line) for line in lines if line}


def python_range(stack: str) -> tuple[str, str]:
    text = STACK_FILES[stack].read_text()
    return tuple(re.search(rf"^# python-{key}: ([0-9.]+)$", text, re.M).group(1) for key in ("min", "max"))


def test_every_stack_of_the_contract_has_its_constraints_file_and_no_other():
    assert set(STACK_FILES) == set(contract.STACKS)
    assert contract.DEFAULT_STACK == contract.STACKS[0]
    assert set(choices.STACK_BASES) == set(contract.STACKS)  # the host side's bases of every stack, and no other
    for stack in contract.STACKS:
        assert choices.STACK_FILE.format(stack=stack) == STACK_FILES[stack].relative_to(REPO).as_posix()


@pytest.mark.parametrize("stack", contract.STACKS)
def test_each_stack_pins_one_tensorflow_and_has_horovod_exactly_when_it_has_the_launcher(stack):
    found = pins(stack)
    tensorflow = found["tensorflow"].specifier
    assert len(tensorflow) == 1 and next(iter(tensorflow)).operator == "==", f"{stack}: pin one TensorFlow"
    version = Version(next(iter(tensorflow)).version)
    assert contract.stack_of_tensorflow(str(version)) == stack
    assert "tensorboard" in found, "TF 2.21 no longer brings TensorBoard, and every run writes its scalars"
    assert ("horovod" in found) == ("horovod" in contract.STACK_LAUNCHERS[stack])
    assert choices.STACK_BASES[stack][-1] == "cpu" and set(choices.STACK_BASES[stack]) <= set(choices.BASES)


@pytest.mark.parametrize("stack", contract.STACKS)
def test_pip_install_e_admits_every_stack(stack):
    """pyproject.toml names ranges that every stack's pins satisfy, so `pip install -e .` pins nothing a
    Python of either stack cannot install."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, before it joined the standard library
        import tomli as tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["gpu"]
                + project["optional-dependencies"]["cpu"]]
    assert {r.name for r in declared} >= {"tensorflow", "tensorflow-cpu"}
    for requirement in declared:
        pinned = pins(stack).get(requirement.name)
        if pinned is not None and next(iter(pinned.specifier)).operator == "==":
            assert next(iter(pinned.specifier)).version in requirement.specifier, (stack, str(requirement))


def test_the_tensorflow_of_ngc_and_of_later_releases_map_to_their_stacks():
    assert contract.stack_of_tensorflow("2.17.0+nv25.2") == "ngc-25.02"
    assert contract.stack_of_tensorflow("2.17.1") == "ngc-25.02"
    assert contract.stack_of_tensorflow("2.21.0") == "current"
    assert contract.stack_of_tensorflow("2.22.0rc0") == "current"


def setup_choice(tmp_path, version: str, *args: str) -> subprocess.CompletedProcess:
    """`ci/setup.sh --print-stack` with a stand-in python3 that reports `version`."""
    folder = tmp_path / f"python{version}"
    folder.mkdir()
    (folder / "python3").write_text(f"#!/bin/sh\necho {version}\n")
    (folder / "python3").chmod(0o755)
    return subprocess.run(["bash", "ci/setup.sh", "--print-stack", *args], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": f"{folder}:/usr/bin:/bin"})


@pytest.mark.parametrize("version", ["3.9", "3.10", "3.11", "3.12", "3.13", "3.14"])
def test_setup_picks_the_first_stack_this_python_installs_or_says_none_does(tmp_path, version):
    fits = [s for s in contract.STACKS
            if Version(python_range(s)[0]) <= Version(version) <= Version(python_range(s)[1])]
    process = setup_choice(tmp_path, version)
    if fits:
        assert process.returncode == 0 and process.stdout.strip() == fits[0], process.stderr
    else:
        assert process.returncode == 2 and process.stderr.count("\n") == 1, process.stderr
        assert f"no stack installs on Python {version}" in process.stderr


def test_setup_names_the_range_when_the_stack_asked_for_does_not_fit(tmp_path):
    process = setup_choice(tmp_path, "3.13", "--stack", "ngc-25.02")
    low, high = python_range("ngc-25.02")
    assert process.returncode == 2
    assert f"stack ngc-25.02 needs Python {low}-{high}, and python3 is 3.13" in process.stderr


def test_setup_refuses_horovod_on_a_stack_without_it(tmp_path):
    process = setup_choice(tmp_path, "3.13", "--stack", "current", "--horovod")
    assert process.returncode == 0  # --print-stack answers before anything is installed
    folder = tmp_path / "python3.13"
    process = subprocess.run(["bash", "ci/setup.sh", "--stack", "current", "--horovod", "--venv", str(tmp_path / "v")],
                             cwd=REPO, capture_output=True, text=True, env={"PATH": f"{folder}:/usr/bin:/bin"})
    assert process.returncode == 2 and "stack current has no horovod launcher" in process.stderr
    assert not (tmp_path / "v").exists()


def test_an_unknown_tensorflow_build_is_one_line_and_makes_no_venv(tmp_path):
    process = subprocess.run(["bash", "ci/setup.sh", "--tensorflow", "cuda", "--venv", str(tmp_path / "v")], cwd=REPO,
                             capture_output=True, text=True)
    assert process.returncode == 2, process.stderr
    assert process.stderr.splitlines()[-1] == ("ci/setup.sh: error: unknown --tensorflow 'cuda'; choose gpu (the CUDA "
                                               "build, tensorflow) or cpu (tensorflow-cpu)")
    assert not (tmp_path / "v").exists()


def test_horovod_on_the_current_stack_is_one_line_naming_the_stack_that_has_it():
    process = run_invoke("run", "mnist-cnn", "--gpus", "8", "--stack", "current", "--launcher", "horovod",
                         "--runtime", "docker", "--dry")
    assert process.returncode == 2 and process.stderr.count("\n") == 1, process.stderr
    assert "does not run on the current stack" in process.stderr and "--stack ngc-25.02" in process.stderr


@pytest.mark.parametrize("stack", contract.STACKS)
def test_each_stack_builds_its_own_images(stack):
    from tasks import images

    gpu = choices.STACK_BASES[stack][0]
    build = run_invoke("build", "mnist-cnn", "--stack", stack, "--dry")
    assert build.returncode == 0, build.stderr
    assert f"--build-arg STACK={stack}" in build.stdout
    base = re.search(r"--build-arg BASE_IMAGE=(\S+)", build.stdout).group(1)
    if stack == "current":
        assert base == "tf-recipes/gpu-base:current"
        gpu_base = run_invoke("images.gpu", "--stack", stack, "--dry")
        wanted = "-f images/current/Dockerfile -t tf-recipes/gpu-base:current --target gpu"
        assert gpu_base.returncode == 0 and wanted in gpu_base.stdout, gpu_base.stderr
    run = run_invoke("run", "mnist-cnn", "--gpus", "8", "--stack", stack, "--launcher", "multiworker",
                     "--runtime", "docker", "--dry")
    assert run.returncode == 0, run.stderr
    tag = re.search(r"tf-recipes/mnist-cnn:(\S+)", run.stdout).group(1)
    assert tag == (gpu if stack == contract.DEFAULT_STACK else f"{stack}-{gpu}")
    cpu = run_invoke("images.cpu", "--stack", stack, "--dry")
    assert cpu.returncode == 0 and f"-f {images.CPU_DOCKERFILES[stack]} " in cpu.stdout, cpu.stderr


def print_horovod_wheel(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`ci/setup.sh --print-horovod-wheel` with a stand-in python3 (3.11) and a venv whose pip keeps its
    cache in tmp_path/cache; no GPU, so the TensorFlow wheel is tensorflow-cpu."""
    folder = tmp_path / "bin"
    venv = tmp_path / "venv" / "bin"
    for path, text in ((folder / "python3", "echo 3.11"), (venv / "python", f"echo {tmp_path / 'cache'}")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{text}\n")
        path.chmod(0o755)
    return subprocess.run(["bash", "ci/setup.sh", "--print-horovod-wheel", "--tensorflow", "cpu",
                           "--venv", str(tmp_path / "venv"), *args], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": f"{folder}:/usr/bin:/bin"})


def test_setup_names_the_horovod_wheel_it_built_or_says_there_is_none(tmp_path):
    missing = print_horovod_wheel(tmp_path, "--stack", "ngc-25.02")
    assert missing.returncode == 2 and missing.stdout == "" and missing.stderr.count("\n") == 1, missing.stderr
    assert "no Horovod wheel was built here for stack ngc-25.02, tensorflow-cpu and Python 3.11" in missing.stderr
    # Where --horovod keeps it: the folder names the stack's TensorFlow wheel and version, Python, the
    # controllers and the build (release: without debug information).
    tensorflow = next(line.split("==")[1] for line in (REPO / "stacks" / "ngc-25.02.txt").read_text().splitlines()
                      if line.startswith("tensorflow=="))
    folder = f"horovod-0.28.1-tensorflow-cpu{tensorflow}-py3.11-gloo-mpi-release"
    kept = tmp_path / "cache" / "tf-recipes-wheels" / folder / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"")
    found = print_horovod_wheel(tmp_path, "--stack", "ngc-25.02")
    assert (found.returncode, found.stdout, found.stderr) == (0, f"{kept}\n", "")
    other = print_horovod_wheel(tmp_path, "--stack", "current")
    assert other.returncode == 2 and other.stderr.count("\n") == 1
    assert "stack current has no horovod launcher, so no Horovod wheel" in other.stderr


def test_horovods_cmake_configures_without_debug_information_and_builds_unchanged(tmp_path):
    """tools/horovod_cmake.sh (HOROVOD_CMAKE in ci/setup.sh and images/cpu) with a cmake on PATH that prints
    its arguments: configuring gets RelWithDebInfo's flags without -g, `cmake --build` is passed through."""
    fake = tmp_path / "bin" / "cmake"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:/usr/bin:/bin"}
    script = str(REPO / "tools" / "horovod_cmake.sh")

    def arguments(*args):
        process = subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=30)
        assert process.returncode == 0, process.stderr
        return process.stdout.splitlines()

    configure = arguments("/src/horovod", "-DCMAKE_BUILD_TYPE=RelWithDebInfo")
    assert configure[:2] == ["/src/horovod", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"]
    flags = {arg.split("=", 1)[0]: arg.split("=", 1)[1] for arg in configure[2:]}
    assert flags == {"-DCMAKE_C_FLAGS_RELWITHDEBINFO": "-O2 -DNDEBUG",
                     "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO": "-O2 -DNDEBUG"}
    assert arguments("--build", ".", "--config", "RelWithDebInfo") == ["--build", ".", "--config", "RelWithDebInfo"]


def compiler_choice(tmp_path, *tools) -> str:
    """ci/setup.sh --print-compiler with a PATH that holds only `dirname` and stand-ins for TOOLS."""
    folder = tmp_path / "-".join(tools or ("none",))
    folder.mkdir()
    (folder / "dirname").symlink_to(shutil.which("dirname"))
    for name in tools:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    process = subprocess.run(["/bin/bash", str(REPO / "ci" / "setup.sh"), "--print-compiler"], capture_output=True,
                             text=True, timeout=60, env={"PATH": str(folder)})
    assert process.returncode == 0, process.stderr
    return process.stdout.strip()


def test_horovod_is_compiled_with_gcc_12_where_it_is_installed_else_with_the_default(tmp_path):
    assert compiler_choice(tmp_path, "gcc-12", "g++-12", "g++-13") == "gcc-12 g++-12"
    assert compiler_choice(tmp_path, "g++-13", "g++") == "default"
    assert compiler_choice(tmp_path, "g++-12") == "default"  # no C compiler of the same version
    assert compiler_choice(tmp_path) == "default"
