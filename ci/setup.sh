#!/usr/bin/env bash
# Set up this checkout for training and testing: a virtual environment in .venv with TensorFlow
# 2.17.1, Keras >= 3.8, TFDS, invoke and pytest, and (with --horovod) Horovod 0.28.1 built from
# source with Gloo against that TensorFlow.
#
#   bash ci/setup.sh             # training on one process, mirrored and multiworker
#   bash ci/setup.sh --horovod   # also the horovod launcher (needs cmake and g++; ~3 min the first time)
#
# Idempotent: a second run installs nothing new. pip keeps the Horovod wheel it built in its cache,
# so a fresh .venv on the same machine does not compile Horovod again.
set -euo pipefail
cd "$(dirname "$0")/.."

with_horovod=0
for arg in "$@"; do
    case "$arg" in
        --horovod) with_horovod=1 ;;
        *) echo "ci/setup.sh: unknown option $arg (known: --horovod)" >&2; exit 2 ;;
    esac
done

log() { printf '[setup] %s\n' "$*" >&2; }

if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $(python3 --version)"
    python3 -m venv .venv
fi
log "installing tf-recipes and its dependencies into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"

if [ "$with_horovod" = 1 ]; then
    if .venv/bin/python -c "import horovod.tensorflow" 2>/dev/null; then
        log "horovod already installed: $(.venv/bin/python -c 'import horovod; print(horovod.__version__)')"
    else
        for tool in cmake g++; do
            command -v "$tool" >/dev/null || { log "ERROR: building Horovod needs $tool (apt-get install $tool)"; exit 1; }
        done
        log "building horovod 0.28.1 against TensorFlow $(.venv/bin/python -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null) with Gloo"
        # --no-build-isolation: Horovod must compile against the TensorFlow installed here.
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
            .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation "horovod==0.28.1"
    fi
    .venv/bin/horovodrun --check-build
fi
log "ready: .venv/bin/invoke --list"
