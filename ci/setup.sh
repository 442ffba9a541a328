#!/usr/bin/env bash
# Set up this checkout for training and testing: a virtual environment in .venv with TensorFlow
# 2.17.1, Keras >= 3.8, TFDS, invoke and pytest, and (with --horovod) Horovod 0.28.1 built from
# source with Gloo against that TensorFlow.
#
#   bash ci/setup.sh             # training on one process, mirrored and multiworker
#   bash ci/setup.sh --horovod   # also the horovod launcher (needs cmake and g++; ~3 min the first time)
#   bash ci/setup.sh --print-compiler   # which C/C++ compilers Horovod would be built with; nothing else
#
# Horovod 0.28.1 is compiled with GCC 12 (CC=gcc-12 CXX=g++-12) wherever gcc-12 and g++-12 are on PATH,
# else with the default compiler. GCC 12 is Debian 12's, which it is built with here; GitHub's
# ubuntu-24.04 has GCC 12, 13 and 14 with 13 the default, and 0.28.1 predates Horovod's fix of the
# headers GCC 13 no longer includes for it.
#
# Idempotent: a second run installs nothing new. pip keeps the Horovod wheel it built in its cache,
# so a fresh .venv on the same machine does not compile Horovod again.
set -euo pipefail
cd "$(dirname "$0")/.."

with_horovod=0
print_compiler=0
for arg in "$@"; do
    case "$arg" in
        --horovod) with_horovod=1 ;;
        --print-compiler) print_compiler=1 ;;
        *) echo "ci/setup.sh: unknown option $arg (known: --horovod, --print-compiler)" >&2; exit 2 ;;
    esac
done

log() { printf '[setup] %s\n' "$*" >&2; }

# "CC CXX" for Horovod's build: gcc-12 g++-12 when both are on PATH, else nothing (the default).
horovod_compilers() {
    if command -v gcc-12 >/dev/null 2>&1 && command -v g++-12 >/dev/null 2>&1; then
        echo "gcc-12 g++-12"
    fi
}

if [ "$print_compiler" = 1 ]; then
    choice="$(horovod_compilers)"
    echo "${choice:-default}"
    exit 0
fi

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
        read -r cc cxx <<<"$(horovod_compilers)" || true
        if [ -n "${cc:-}" ]; then
            export CC="$cc" CXX="$cxx"
            log "compiling Horovod with $CC and $CXX ($("$CXX" -dumpfullversion))"
        else
            log "compiling Horovod with the default compiler, no gcc-12/g++-12 on PATH ($(g++ -dumpfullversion 2>/dev/null || echo '?'))"
        fi
        # --no-build-isolation: Horovod must compile against the TensorFlow installed here.
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
            .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-build-isolation "horovod==0.28.1"
    fi
    .venv/bin/horovodrun --check-build
fi
log "ready: .venv/bin/invoke --list"
