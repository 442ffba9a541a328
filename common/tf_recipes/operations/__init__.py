"""Operations: what runs around a training process, never inside its step.

- `spawn`: starts the processes of a multiworker job on one host (python -m tf_recipes.operations.spawn);
- `preflight`: checks a machine or cluster before a job is sent to it (GPUs, collectives, folders);
- `predicting`: predict.py's engine, the exported model applied to a folder of images;
- `constraints`: the limits a launch is checked against before it starts;
- `faults`: faults injected from outside the run, for the tests and the nightly's control cells;
- `pipeline_bench`: the input pipelines' throughput, for the recipes' benchmark_input.py.

They may use the engine and the command line (tf_recipes.cli); nothing in the engine imports them
(the layers are an import-linter contract in pyproject.toml). The names below are what operations and the
host side (commands/, tasks/) agree on; a training process needs none of them, so they are not in
tf_recipes.contract.
"""

# The preflight check (`invoke preflight`, `python -m tf_recipes.operations.preflight`).
PREFLIGHT_FILE = "preflight.json"  # what every rank reported, and the verdict (in the results folder)
PREFLIGHT_DEFAULT_DEADLINE = 120  # seconds for the whole check, from each process's start


def host_name_problem(host: str) -> str | None:
    """Why `host` cannot be one of --hosts (HOST:SLOTS for horovodrun -H, HOST:PORT in TF_CONFIG), or None."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")
    if not host or not set(host) <= allowed or host[0] in ".-" or host[-1] in ".-":
        return (
            f"{host!r} is not a host name or IPv4 address (letters, digits, '.', '-' and '_'); give "
            "comma-separated names such as node1,node2"
        )
    return None
