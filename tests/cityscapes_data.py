"""A prepared Cityscapes-layout dataset for the cityscapes-unet tests: the fixture release as zips
(make_fixture.py), then prepare_data.py, as a user prepares the real one. Made once per test session
and only read by the tests that use it."""
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
