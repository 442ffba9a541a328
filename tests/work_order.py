"""How ci/test.sh hands the suite to its two pytest workers (`-n 2 --dist loadscope
--no-loadscope-reorder`, pytest-xdist; tests/conftest.py plugs this in).

Each worker takes one unit of work at a time, in the order of the collected items, and a unit's tests
run in order on one worker. A unit is a test module (its module-scoped fixtures are made once), or one
of SHARED: modules that use one thing that must serve one test at a time.

The longest go out first, so that the last ones handed out are short and the two workers end
together: FIRST in its order (measured: the slowest units of a cold run), then the other units of
the integration tier, then the recipes tier, then the unit tier, whose hundreds of second-long tests
fill the end. A name here that matches no module or unit orders nothing."""

SHARED = {
    # The two-node SLURM cluster: two multiworker jobs on one node would both listen on
    # SlurmClusterResolver's port 8888.
    "slurm": ["integration/test_slurm_cluster", "integration/test_stop_slurm", "integration/test_preflight_runs",
              "integration/test_apptainer"],
}
# Measured on two cold runs (each unit's test durations summed, two workers busy), and paired: a unit
# that mostly waits (downloads, SLURM jobs of one CPU, signals, timeouts) is handed out next to one that
# computes, so that the two workers together keep both cores busy. The units that need
# ci/prepare-images.sh's images come after the first two, by when those are built.
FIRST = [
    "integration/test_quickstart_debian",  # waits: two fresh Debian trees download TensorFlow (320-380 s)
    "integration/test_mnist_launchers",  # computes (240-350 s)
    "slurm",  # waits: one-CPU jobs, a requeue (400 s), with the SIF
    "integration/test_precision",  # computes (240-270 s)
    "integration/test_stop_resume",  # waits: signals and resumes (100-260 s)
    "integration/test_cassava_launchers",  # computes (220-240 s)
    "integration/test_cluster_failures",  # waits: lost peers and deadlines (50-160 s)
    "integration/test_cityscapes_launchers",  # computes (180-230 s)
    "integration/test_k8s_in_docker",
    "integration/test_nightly_workflow",
    "integration/test_containers",
    "integration/test_stop_docker",
    "integration/test_nightly_controls",
    "integration/test_new_recipe",
    "integration/test_copy_out",  # a fresh venv, then trains and builds an image from a copied folder (100 s)
    "integration/test_predict",
    "integration/test_bench_run",
    "integration/test_resume",
    "integration/test_documented_commands",
]


def unit_of(nodeid: str) -> str:
    """The unit of work of a test: its module's path under tests/ without .py, or its SHARED name."""
    module = nodeid.split("::")[0].removeprefix("tests/").removesuffix(".py")
    return next((name for name, modules in SHARED.items() if module in modules), module)


TIERS = ("integration", "recipes", "unit")  # after FIRST, in this order


def sort(items) -> None:
    """FIRST's units in its order, then the tiers in TIERS' order; within a tier, pytest's order."""
    rank = {name: index for index, name in enumerate(FIRST)}

    def key(item):
        unit = unit_of(item.nodeid)
        if unit in rank:
            return (0, rank[unit])
        tier = item.nodeid.removeprefix("tests/").split("/")[0]
        return (1, TIERS.index(tier) if tier in TIERS else len(TIERS))

    items.sort(key=key)
