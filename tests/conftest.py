"""Fixtures shared by all tests."""
import os

import pytest

from cityscapes_data import prepared  # noqa: F401 (the prepared Cityscapes fixture, made once)
from helpers import horovod_available
import work_order


@pytest.fixture(scope="session")
def require_horovod():
    # ci/test.sh builds Horovod and sets TF_RECIPES_STRICT=1: there a missing Horovod fails the
    # run instead of skipping; in a bare checkout the skip says how to get it.
    if not horovod_available():
        message = "Horovod is not installed: run `bash ci/setup.sh --horovod`"
        if os.environ.get("TF_RECIPES_STRICT") == "1":
            pytest.fail(message)
        pytest.skip(message)


# -- two workers: ci/test.sh runs `-n 2 --dist loadscope --no-loadscope-reorder` (tests/work_order.py) --

def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the collection it reports is the order of work
        work_order.sort(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope, with work_order.unit_of as the scope."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_order.unit_of(nodeid)

    return Units(config, log)
