"""The code passes its linters: shellcheck finds nothing in any tracked shell script (the generated launch
scripts included), ruff nothing in the Python (pyproject.toml's [tool.ruff]). Both come with the dev extra
(`bash ci/setup.sh`); a missing one fails the test, never skips it."""
import pathlib
import re
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.repository

# #!/bin/bash, #!/bin/sh -e, #!/usr/bin/env bash, #!/usr/bin/env -S bash -e: the shells shellcheck reads.
SHELL_SHEBANG = re.compile(rb"#!\s*(\S*/)?(env\s+(-\S+\s+)*)?(ba|da|k)?sh(\s|$)")


def tool(name: str) -> str:
    path = pathlib.Path(sys.executable).parent / name
    if not path.is_file():
        pytest.fail(f"{name} is missing from {path.parent}: run `bash ci/setup.sh` (the dev extra installs it)")
    return str(path)


def shell_scripts() -> list[str]:
    """The files git tracks or would (new ones it does not ignore) that are shell scripts: *.sh, or a shebang."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True)
    names = sorted(name for name in listed.stdout.decode().split("\0") if name and (REPO / name).is_file())
    return [name for name in names if name.endswith(".sh") or SHELL_SHEBANG.match(first_line(REPO / name))]


def first_line(path: pathlib.Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.readline(256)


def test_shellcheck_finds_nothing_in_any_shell_script():
    """A finding in a generated script (recipes/*/launch/) is fixed in its builder in commands/, then
    `invoke launch-files`."""
    scripts = shell_scripts()
    assert {"ci/setup.sh", "recipes/mnist-cnn/launch/slurm-horovod.sbatch"} <= set(scripts)
    process = subprocess.run([tool("shellcheck"), "--format=gcc", "--norc", *scripts], cwd=REPO, capture_output=True,
                             text=True, timeout=600)
    assert process.returncode == 0 and not process.stderr, \
        f"shellcheck on {len(scripts)} scripts:\n{process.stdout}{process.stderr}"


def test_ruff_finds_nothing():
    process = subprocess.run([tool("ruff"), "check", "--no-cache", "--output-format=concise", "."], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, f"ruff check (pyproject.toml [tool.ruff]):\n{process.stdout}{process.stderr}"


def test_the_library_is_as_ruff_format_writes_it():
    # The closure budgets (ci/imports.py) count the library's code lines as the formatter lays them out
    process = subprocess.run([tool("ruff"), "format", "--check", "--no-cache", "common"], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, f"run `ruff format common` (common/ruff.toml):\n{process.stdout}{process.stderr}"
