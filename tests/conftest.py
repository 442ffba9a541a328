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


def pytest_addoption(parser):
    parser.addoption("--collected-file", metavar="FILE",
                     help="write how many tests this session selected into FILE (ci/test.sh's tally, "
                          "ci/suite_report.py)")


def pytest_collection_finish(session):
    """How many tests this session selected, into the file --collected-file names: ci/test.sh holds the JUnit
    files against it (ci/suite_report.py). An option, not an environment variable, so that the pytest runs
    a test starts do not inherit it. Under xdist each worker collects the whole selection and writes the
    same number; the controller collects nothing, so it writes nothing."""
    path = session.config.getoption("collected_file")
    controller = session.config.getoption("numprocesses", None) and not hasattr(session.config, "workerinput")
    if path and not controller and not session.config.getoption("collectonly"):
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as handle:
            handle.write(f"{len(session.items)}\n")
        os.replace(temporary, path)


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
