"""Fixtures shared by all tests."""
import os

import pytest

from cityscapes_data import prepared  # noqa: F401 (the prepared Cityscapes fixture, made once)
from helpers import horovod_available


@pytest.fixture(scope="session")
def require_horovod():
    # ci/test.sh builds Horovod and sets TF_RECIPES_STRICT=1: there a missing Horovod fails the
    # run instead of skipping; in a bare checkout the skip says how to get it.
    if not horovod_available():
        message = "Horovod is not installed: run `bash ci/setup.sh --horovod`"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)
