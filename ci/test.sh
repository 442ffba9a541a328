#!/usr/bin/env bash
# Run the test suite on a fresh Debian 12 machine, setting up what it needs first.
#
# The suite has three tiers, run in this order (testpaths in pyproject.toml):
#   tests/unit         builders, planning, parsing, YAML/manifest/workflow checks, README dry runs:
#                      seconds each; no training, no Docker engine, no SLURM
#   tests/recipes      each recipe's data, input pipeline, model, damaged data, one-process training
#   tests/integration  launchers in several processes, Docker, SLURM, act, Kubernetes in Docker,
#                      stop and resume, several hosts, benchmarks
#
#   bash ci/test.sh                 # everything: .venv with Horovod (ci/setup.sh), a Docker engine
#                                   # (ci/docker-engine.sh) and a one-node SLURM cluster
#                                   # (ci/slurm-cluster.sh), both need root; then the whole suite
#   bash ci/test.sh -k parity       # extra arguments go to pytest
#   bash ci/test.sh --fast          # tests/unit only, under 3 minutes: ci/setup.sh, no Docker, no SLURM
#   bash ci/test.sh --fast -k k8s   # extra arguments go to pytest here too
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/setup.sh --horovod
# Strict: tests that would skip for a missing Horovod or Docker engine fail instead.
if [ "${1:-}" = "--fast" ]; then
    shift
    TF_RECIPES_STRICT=1 exec .venv/bin/python -m pytest tests/unit "$@"
fi
bash ci/docker-engine.sh
bash ci/slurm-cluster.sh
TF_RECIPES_STRICT=1 exec .venv/bin/python -m pytest "$@"
