#!/usr/bin/env bash
# Make a Docker engine answer on this machine, then say which client can build with BuildKit secrets.
#
# Idempotent: installs docker.io, debootstrap and debian-archive-keyring only if missing, starts dockerd only if no engine
# answers. Needs root for that (apt-get, dockerd). An engine that already answers (a GitHub runner, a
# laptop with Docker) needs neither root nor docker.io: it is reported and reused; debootstrap (only
# `invoke images.bootstrap` needs it) is then installed only when running as root.
#
#   ci/docker-engine.sh            # install if needed, start, wait, report
#
# Environment:
#   DOCKERD_LOG      where dockerd writes its log (default /var/log/dockerd.log)
#   DOCKERD_TIMEOUT  seconds to wait for `docker info` to answer (default 60)
set -euo pipefail

DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
DOCKERD_TIMEOUT="${DOCKERD_TIMEOUT:-60}"

log() { printf '[docker-engine] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The first docker on PATH may be a newer client than the engine package's; either can talk to the
# engine, so use whichever answers.
engine_answers() { docker info >/dev/null 2>&1 || /usr/bin/docker info >/dev/null 2>&1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# --- install ---------------------------------------------------------------------------------
missing=()
if ! engine_answers; then
    is_root || die "no Docker engine answers, and starting one needs root (apt-get, dockerd); try: sudo $0"
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
fi
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# debootstrap checks bookworm's Release file with Debian's archive keys; Ubuntu (a GitHub runner) lacks them.
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
if [ "${#missing[@]}" -eq 0 ]; then
    log "nothing to install"
elif ! is_root; then
    log "not root, so not installing ${missing[*]} (only 'invoke images.bootstrap' needs it)"
else
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- start -----------------------------------------------------------------------------------
if engine_answers; then
    log "an engine already answers"
else
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    log "starting dockerd in the background (log: $DOCKERD_LOG)"
    nohup dockerd >>"$DOCKERD_LOG" 2>&1 &
    dockerd_pid=$!
    waited=0
    until engine_answers; do
        if ! kill -0 "$dockerd_pid" 2>/dev/null; then
            tail -n 20 "$DOCKERD_LOG" >&2 || true
            die "dockerd (pid $dockerd_pid) exited; see $DOCKERD_LOG"
        fi
        if [ "$waited" -ge "$DOCKERD_TIMEOUT" ]; then
            tail -n 20 "$DOCKERD_LOG" >&2 || true
            die "no answer from 'docker info' after ${DOCKERD_TIMEOUT}s; see $DOCKERD_LOG or raise DOCKERD_TIMEOUT"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    log "engine answers after ${waited}s (dockerd pid $dockerd_pid)"
fi

# --- which client builds with `--secret` -----------------------------------------------------
# `docker build --secret` needs BuildKit: either the buildx plugin or a client with BuildKit built in
# (Debian's docker.io 20.10 client, with DOCKER_BUILDKIT=1).
buildkit_client=""
for client in $(type -P -a docker 2>/dev/null) /usr/bin/docker; do
    [ -x "$client" ] || continue
    # /bin is a symlink to /usr/bin on Debian 12: test each real binary once.
    real="$(readlink -f "$client")"
    case " ${seen:-} " in *" $real "*) continue ;; esac
    seen="${seen:-} $real"
    if DOCKER_BUILDKIT=1 "$client" build --help 2>/dev/null | grep -q -- '--secret'; then
        buildkit_client="$client"
        break
    fi
    log "$client ($("$client" version --format '{{.Client.Version}}' 2>/dev/null || echo '?')): no BuildKit --secret"
done
[ -n "$buildkit_client" ] || die "no docker client supports 'build --secret'; install the buildx plugin or Debian's docker.io"

version="$("$buildkit_client" version --format '{{.Client.Version}}' 2>/dev/null || echo '?')"
log "BuildKit client: $buildkit_client ($version); build with DOCKER_BUILDKIT=1"
# stdout carries only the path, so callers can do: DOCKER="$(ci/docker-engine.sh)"
echo "$buildkit_client"
