#!/usr/bin/env bash
# Build the images the container tests use, ahead of them: the debootstrap Debian base, the CPU base
# (with the Horovod wheel of the setting horovod_wheel, else Horovod compiled in it), mnist-cnn's
# CPU image (the other recipes train in their images every night, not on every push), and
# mnist-cnn's SIF when an `apptainer` runs.
# ci/test.sh starts it in the background while the first tests run, so the builds, which mostly
# wait on downloads, overlap with training on the other core.
#
#   bash ci/prepare-images.sh      # with .venv's invoke (ci/setup.sh) and an engine (ci/docker-engine.sh)
#
# Each build holds build/locks/NAME.lock, the lock the test fixtures hold while they build the same
# thing (tests/helpers.py, made_once): a test that needs an image still being built here waits for it,
# then finds it in the engine's cache. A build that fails here is only reported: the fixture that needs
# it builds it again, and its failure fails that test with the build's output.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

invoke=.venv/bin/invoke
locks=build/locks
mkdir -p "$locks"

log() { printf '[prepare-images] %s %s\n' "$(date +%T)" "$*"; }

# step NAME COMMAND...: COMMAND under NAME's lock; a failure is reported, not fatal.
step() {
    local name=$1 started=$SECONDS
    shift
    log "$name: $*"
    if flock "$locks/$name.lock" "$@"; then
        log "$name: done in $((SECONDS - started)) s"
    else
        log "$name: FAILED after $((SECONDS - started)) s (the tests that need it build it again and show why)"
    fi
}

[ -x "$invoke" ] || { log "no $invoke: run bash ci/setup.sh first"; exit 2; }
docker info >/dev/null 2>&1 || { log "no Docker engine answers: run bash ci/docker-engine.sh first"; exit 2; }

# With INVOKE_TF_RECIPES_HOROVOD_WHEEL set (ci/test.sh sets it to the wheel ci/setup.sh --horovod
# compiled), the CPU base installs that wheel instead of compiling Horovod again.
if [ -n "${INVOKE_TF_RECIPES_HOROVOD_WHEEL:-}" ]; then
    log "cpu-base: Horovod from $INVOKE_TF_RECIPES_HOROVOD_WHEEL"
else
    log "cpu-base: Horovod compiled in the image (no INVOKE_TF_RECIPES_HOROVOD_WHEEL)"
fi
step cpu-base bash -c "{ docker image inspect tf-recipes/debian:bookworm >/dev/null 2>&1 || $invoke images.bootstrap; } \
                       && $invoke images.cpu"
step image-mnist-cnn "$invoke" build mnist-cnn --base cpu
if apptainer version >/dev/null 2>&1; then
    # The same build, with the same compression, as tests/integration/test_apptainer.py's.
    step sif-mnist-cnn "$invoke" build mnist-cnn --base cpu --runtime apptainer --sif-compression zstd
else
    log "sif-mnist-cnn: no apptainer runs here; tests/integration/test_apptainer.py builds it or says why not"
fi
