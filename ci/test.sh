#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian 12 machine, then run the whole suite:
# .venv with Horovod (ci/setup.sh), a Docker engine (ci/docker-engine.sh) and a one-node SLURM
# cluster (ci/slurm-cluster.sh), both need root; then pytest.
#
#   bash ci/test.sh                 # everything
#   bash ci/test.sh -k parity       # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/setup.sh --horovod
bash ci/docker-engine.sh
bash ci/slurm-cluster.sh
# Strict: tests that would skip for a missing Horovod or Docker engine fail instead.
TF_RECIPES_STRICT=1 exec .venv/bin/python -m pytest "$@"
