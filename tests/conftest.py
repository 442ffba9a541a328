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


# -- two workers: how the suite is handed out ------------------------------------------------------
# ci/test.sh runs pytest with `-n 2 --dist loadscope --no-loadscope-reorder` (pytest-xdist): each of the
# two workers takes one unit of work at a time, in the order of the collected items, and a unit's tests
# run in order on one worker. A unit is a test module (its module-scoped fixtures are made once), or one
# of SHARED: modules that use one thing that must serve one test at a time. FIRST go out first, the
# longest first, so that the last units handed out are short and the two workers end together; the
# rest keep pytest's order (unit, recipes, integration). tests/unit/test_test_order.py keeps every
# name below true to tests/.
SHARED = {
    # The two-node SLURM cluster: two multiworker jobs on one node would both listen on
    # SlurmClusterResolver's port 8888.
    "slurm": ["integration/test_slurm_cluster", "integration/test_stop_slurm", "integration/test_preflight_runs",
              "integration/test_apptainer"],
}
FIRST = [
    "integration/test_quickstart_debian",  # two fresh Debian trees download TensorFlow: mostly waiting
    "integration/test_mnist_launchers",
    "integration/test_precision",
    # ci/prepare-images.sh has built the images by now
    "slurm",
    "integration/test_k8s_in_docker",
    "integration/test_nightly_workflow",
    "integration/test_cassava_launchers",
    "integration/test_containers",
    "integration/test_stop_resume",
    "integration/test_predict",
    "integration/test_new_recipe",
    "integration/test_documented_commands",
]


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its module's path under tests/ without .py, or its SHARED name."""
    module = nodeid.split("::")[0].removeprefix("tests/").removesuffix(".py")
    return next((name for name, modules in SHARED.items() if module in modules), module)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the collection it reports is the order of work
        rank = {name: index for index, name in enumerate(FIRST)}
        items.sort(key=lambda item: rank.get(unit_of(item.nodeid), len(FIRST)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadscope, with unit_of as the scope."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return Units(config, log)
