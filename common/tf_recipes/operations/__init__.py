"""Operations: what runs around a training process, never inside its step.

- `spawn`: starts the processes of a multiworker job on one host (python -m tf_recipes.operations.spawn);
- `preflight`: checks a machine or cluster before a job is sent to it (GPUs, collectives, folders);
- `predicting`: predict.py's engine, the exported model applied to a folder of images;
- `constraints`: the limits a launch is checked against before it starts;
- `faults`: faults injected from outside the run, for the tests and the nightly's control cells;
- `pipeline_bench`: the input pipelines' throughput, for the recipes' benchmark_input.py.

They may use the engine and the command line (tf_recipes.cli); nothing in the engine imports them
(the layers are an import-linter contract in pyproject.toml).
"""
