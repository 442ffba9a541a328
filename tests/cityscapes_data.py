"""A prepared Cityscapes-layout dataset for the cityscapes-unet tests: the fixture release as zips
(make_fixture.py), then prepare_data.py, as a user prepares the real one. Made once per test session
and only read by the tests that use it."""
import json
import os
import subprocess
import sys
import zipfile

import pytest

from helpers import assert_ok, run_python

RECIPE = "recipes/cityscapes-unet"


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("cityscapes")
    assert_ok(run_python(f"{RECIPE}/make_fixture.py", "--out", str(root / "release"), "--zip", "--no-tree",
                         "--train", "8", "--val", "4"))
    assert_ok(run_python(f"{RECIPE}/prepare_data.py", "--source", str(root / "release"),
                         "--out", str(root / "prepared")))
    return root / "prepared"


def official_evaluation(release, predictions, work) -> dict:
    """cityscapesScripts' own evaluation (csEvalPixelLevelSemanticLabeling, as the README runs it) of the
    label-id PNGs in `predictions` against the val ground truth of the fixture `release` (its zips):
    its JSON, with classScores, categoryScores and their averages."""
    zipfile.ZipFile(os.path.join(release, "gtFine_trainvaltest.zip")).extractall(work)
    env = {**os.environ, "CITYSCAPES_DATASET": str(work), "CITYSCAPES_RESULTS": str(predictions),
           "CITYSCAPES_EXPORT_DIR": str(work)}
    command = os.path.join(os.path.dirname(sys.executable), "csEvalPixelLevelSemanticLabeling")  # the venv's
    process = subprocess.run([command], env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stdout + process.stderr
    with open(os.path.join(work, "resultPixelLevelSemanticLabeling.json")) as handle:
        return json.load(handle)
