#!/usr/bin/env bash
# What a self-hosted GPU runner needs before the nightly gpu job can run on it, checked in seconds.
# The gpu job of .github/workflows/nightly.yml runs this first. One line per requirement: `ok: ...` on
# stdout, `missing: ...` on stderr; exit 1 when anything is missing, 0 otherwise.
#
#   bash ci/runner-preflight.sh
#
# Requirements: a Docker engine that answers this user without sudo; the NVIDIA container toolkit
# (an `nvidia` runtime in `docker info`); free disk where Docker keeps its images; Python's venv
# module with ensurepip (Debian's python3-venv), for ci/setup.sh; OpenMPI's compiler wrapper and
# headers (Debian's libopenmpi-dev, openmpi-bin), which `ci/setup.sh --horovod` builds Horovod with
# and installs only as root; a runner new enough for node24
# actions (2.327.1 or later).
#
# Environment:
#   RUNNER_VERSION         the runner's version (default: asked of the runner's bin/Runner.Listener,
#                          found from RUNNER_WORKSPACE, which the runner sets to <runner>/_work/<repo>)
#   PREFLIGHT_MIN_FREE_GB  free GB wanted under Docker's root folder (default 40: the NGC TensorFlow
#                          image and the recipe images built on it; a margin, not a measurement)
set -uo pipefail

MIN_RUNNER=2.327.1
MIN_FREE_GB="${PREFLIGHT_MIN_FREE_GB:-40}"
missing=0

ok() { printf 'ok: %s\n' "$*"; }
lack() { printf 'missing: %s\n' "$*" >&2; missing=$((missing + 1)); }

# -- Docker, without sudo, and the NVIDIA runtime ------------------------------------------------
if runtimes="$(docker info --format '{{json .Runtimes}}' 2>/dev/null)"; then
    ok "docker answers $(id -un) without sudo"
    if grep -q '"nvidia"' <<<"$runtimes"; then
        ok "NVIDIA container toolkit: docker lists the nvidia runtime"
    else
        lack "NVIDIA container toolkit: docker info lists no nvidia runtime (runtimes: $(grep -o '"[a-z0-9.-]*":{' <<<"$runtimes" | tr -d '":{' | paste -sd, -)); install nvidia-container-toolkit and run 'nvidia-ctk runtime configure --runtime=docker'"
    fi
    root_dir="$(docker info --format '{{.DockerRootDir}}' 2>/dev/null)"
else
    lack "docker: 'docker info' fails for $(id -un) without sudo; add the user to the docker group"
    lack "NVIDIA container toolkit: cannot be checked, docker does not answer"
    root_dir=/var/lib/docker
fi

# -- disk ------------------------------------------------------------------------------------------
probe="$root_dir"
[ -d "$probe" ] || probe=/
free_kb="$(df -Pk "$probe" 2>/dev/null | awk 'NR == 2 {print $4}')"
if [ -n "$free_kb" ] && [ "$free_kb" -ge $((MIN_FREE_GB * 1024 * 1024)) ]; then
    ok "disk: $((free_kb / 1024 / 1024)) GB free under $probe (wanted $MIN_FREE_GB)"
else
    lack "disk: $((${free_kb:-0} / 1024 / 1024)) GB free under $probe; the NGC image and the recipe images want $MIN_FREE_GB"
fi

# -- python3 with venv -----------------------------------------------------------------------------
if command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' 2>/dev/null; then
    ok "python3 $(python3 -c 'import platform; print(platform.python_version())') with venv and ensurepip"
else
    lack "python3-venv: python3 cannot make a virtual environment (apt-get install python3-venv)"
fi

# -- OpenMPI, for Horovod's MPI controller ---------------------------------------------------------
if command -v mpicxx >/dev/null && command -v mpirun >/dev/null; then
    ok "OpenMPI: $(mpirun --version 2>/dev/null | head -n 1)"
else
    lack "OpenMPI: no mpicxx or mpirun, which ci/setup.sh --horovod builds Horovod with (apt-get install libopenmpi-dev openmpi-bin)"
fi

# -- the runner's version --------------------------------------------------------------------------
version="${RUNNER_VERSION:-}"
if [ -z "$version" ] && [ -n "${RUNNER_WORKSPACE:-}" ]; then
    listener="$(dirname "$(dirname "$RUNNER_WORKSPACE")")/bin/Runner.Listener"
    [ -x "$listener" ] && version="$("$listener" --version 2>/dev/null | head -n 1)"
fi
if [ -z "$version" ]; then
    lack "runner version: unknown (no RUNNER_VERSION, no runner's bin/Runner.Listener); node24 actions need $MIN_RUNNER or later"
elif [ "$(printf '%s\n%s\n' "$MIN_RUNNER" "$version" | sort -V | head -n 1)" = "$MIN_RUNNER" ]; then
    ok "runner version $version (node24 actions need $MIN_RUNNER)"
else
    lack "runner version: $version is older than $MIN_RUNNER, which node24 actions need; update the runner"
fi

if [ "$missing" -gt 0 ]; then
    printf 'preflight: %d requirement(s) missing on this runner\n' "$missing" >&2
    exit 1
fi
echo "preflight: this runner has what the gpu job needs"
