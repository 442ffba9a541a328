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
# Two pytest workers (pytest-xdist), one per core. Work goes out one group at a time in the order
# tests/conftest.py gives (a test module is a unit of work; see its pytest_xdist_make_scheduler).
parallel=(-n 2 --dist loadscope --no-loadscope-reorder)
if [ "$stack" != ngc-25.02 ]; then
    venv=.venv-$stack
    bash ci/setup.sh --stack "$stack" --venv "$venv"
    if [ "$fast" = 1 ]; then
        exec "$venv/bin/python" -m pytest "${parallel[@]}" tests/unit "$@"
    fi
    exec "$venv/bin/python" -m pytest "${parallel[@]}" tests/unit tests/recipes \
        tests/integration/test_mnist_launchers.py tests/integration/test_precision.py "$@"
fi
if [ "$fast" = 1 ]; then
    bash ci/setup.sh --stack ngc-25.02 --horovod
    exec .venv/bin/python -m pytest "${parallel[@]}" tests/unit "$@"
fi

started=$SECONDS
bash ci/setup.sh --stack ngc-25.02  # .venv, without Horovod: what the image builds need
bash ci/docker-engine.sh >/dev/null
# The images build in the background, holding the locks the tests' fixtures take (ci/prepare-images.sh).
mkdir -p build/ci
setsid bash ci/prepare-images.sh >build/ci/prepare-images.log 2>&1 &
prepare=$!  # its own process group, so that everything it started can be stopped
echo "[test] building the test images in the background (log: build/ci/prepare-images.log)" >&2
bash ci/slurm-cluster.sh
bash ci/apptainer.sh
bash ci/setup.sh --stack ngc-25.02 --horovod
setup=$((SECONDS - started))
status=0
.venv/bin/python -m pytest "${parallel[@]}" "$@" || status=$?
# The background builds ended long before the tests that needed them; if pytest stopped first, stop them.
kill -- -"$prepare" 2>/dev/null || true
wait "$prepare" 2>/dev/null || true
# The budget, visible on every run: wall time, and the CPU time of every process this script waited for
# (as /usr/bin/time counts it: not dockerd's, so not what runs in a docker build or a container).
wall=$((SECONDS - started))
cpu=$(times | awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
echo "[test] suite: $wall s (set-up $setup s, tests $((wall - setup)) s); user+system $cpu s," \
     "$(awk -v c="$cpu" -v w="$wall" 'BEGIN { printf "%.2f", w ? c / w : 0 }') cores busy on average" >&2
exit "$status"
