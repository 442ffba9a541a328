"""The GitHub Actions workflows are valid, checked offline: GitHub's workflow schema (check-jsonschema) and
actionlint (with .github/actionlint.yaml, which names the self-hosted runners' labels). A broken workflow
stops the nightly. The validators come from the `dev` extra (`bash ci/setup.sh`); a missing one fails the
test. tests/integration/test_nightly_workflow.py runs the nightly workflow itself under act."""
import pathlib
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.repository

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def tool(name: str, *args: str) -> subprocess.CompletedProcess:
    path = pathlib.Path(sys.executable).parent / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `bash ci/setup.sh` (the dev extra installs {name})")
    return subprocess.run([str(path), *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_every_workflow_matches_githubs_workflow_schema():
    assert {path.name for path in WORKFLOWS} >= {"ci.yml", "nightly.yml"}
    process = tool("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, WORKFLOWS))
    assert process.returncode == 0, process.stdout + process.stderr


def test_actionlint_finds_nothing():
    # -shellcheck= and -pyflakes=: the same result whether or not those happen to be installed.
    process = tool("actionlint", "-config-file", str(REPO / ".github" / "actionlint.yaml"), "-shellcheck=",
                   "-pyflakes=", *map(str, WORKFLOWS))
    assert process.returncode == 0, process.stdout + process.stderr
