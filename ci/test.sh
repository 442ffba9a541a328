#!/usr/bin/env bash
# Run the test suite on a fresh Debian 12 machine, setting up what it needs first.
#
# The suite has three tiers, run in this order (testpaths in pyproject.toml):
#   tests/unit         builders, planning, parsing, YAML/manifest/workflow checks, README dry runs:
#                      seconds each; no training, no Docker engine, no SLURM
#   tests/recipes      each recipe's data, input pipeline, model, damaged data, one-process training
#   tests/integration  launchers in several processes, Docker, Apptainer, SLURM, act, Kubernetes in
#                      Docker, stop and resume, several hosts, benchmarks, the quick start on fresh
#                      Debian 12 and 13 root file systems
#
#   bash ci/test.sh                 # everything, on the ngc-25.02 stack: .venv with Horovod
#                                   # (ci/setup.sh), a Docker engine (ci/docker-engine.sh), a
#                                   # two-node SLURM cluster (ci/slurm-cluster.sh) and an `apptainer`
#                                   # command (ci/apptainer.sh), all three need root; then the
#                                   # whole suite
#   bash ci/test.sh -k parity       # extra arguments go to pytest
#   bash ci/test.sh --fast          # tests/unit only, under 3 minutes: ci/setup.sh, no Docker, no SLURM
#   bash ci/test.sh --fast -k k8s   # extra arguments go to pytest here too
#   bash ci/test.sh --stack current         # the current stack (newest TensorFlow) in .venv-current:
#                                           # the unit and recipes tiers and the launcher parity
#                                           # and precision tests (single, mirrored, multiworker);
#                                           # the nightly runs it
#   bash ci/test.sh --stack current --fast  # the unit tier alone on the current stack
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0
stack=ngc-25.02
while [ $# -gt 0 ]; do
    case "$1" in
        --fast) fast=1; shift ;;
        --stack) [ $# -ge 2 ] || { echo "ci/test.sh: --stack needs a name (ngc-25.02 or current)" >&2; exit 2; }
                 stack=$2; shift 2 ;;
        *) break ;;
    esac
done

# Strict: tests that would skip for a missing Horovod or Docker engine fail instead.
export TF_RECIPES_STRICT=1
if [ "$stack" != ngc-25.02 ]; then
    venv=.venv-$stack
    bash ci/setup.sh --stack "$stack" --venv "$venv"
    if [ "$fast" = 1 ]; then
        exec "$venv/bin/python" -m pytest tests/unit "$@"
    fi
    exec "$venv/bin/python" -m pytest tests/unit tests/recipes tests/integration/test_mnist_launchers.py \
        tests/integration/test_precision.py "$@"
fi
bash ci/setup.sh --stack ngc-25.02 --horovod
if [ "$fast" = 1 ]; then
    exec .venv/bin/python -m pytest tests/unit "$@"
fi
bash ci/docker-engine.sh
bash ci/slurm-cluster.sh
bash ci/apptainer.sh
exec .venv/bin/python -m pytest "$@"
