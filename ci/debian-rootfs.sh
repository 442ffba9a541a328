#!/usr/bin/env bash
# Make a fresh minimal Debian root filesystem in DIR: what a newcomer's machine has for the README's
# quick start (python3, python3-venv, ca-certificates), and nothing of this repository.
# tests/integration/test_quickstart_debian.py runs the quick start in it under chroot.
#
#   bash ci/debian-rootfs.sh bookworm DIR   # Debian 12, Python 3.11
#   bash ci/debian-rootfs.sh trixie DIR     # Debian 13, Python 3.13
#   bash ci/debian-rootfs.sh sid DIR        # Debian unstable (ci/apptainer.sh installs Apptainer in it)
#
# The first time, `debootstrap --variant=minbase` builds the tree (about a minute) and a tarball of it
# is kept in the cache folder; later calls only extract that tarball. Delete the tarball to rebuild it
# with today's packages. DIR must be absent or empty; a DIR this script made for the same SUITE is
# left as it is (idempotent); anything else is refused, never deleted. Needs root and debootstrap.
#
# Environment:
#   TF_RECIPES_ROOTFS_CACHE  the cache folder (default ${XDG_CACHE_HOME:-$HOME/.cache}/tf-recipes/rootfs),
#                            holding SUITE.tar
#   DEBIAN_MIRROR            the archive debootstrap reads (default http://deb.debian.org/debian)
set -euo pipefail

usage() { echo "usage: $0 bookworm|trixie|sid DIR" >&2; exit 2; }
die() { echo "ci/debian-rootfs.sh: error: $1" >&2; exit "${2:-1}"; }
log() { printf '[debian-rootfs] %s\n' "$*" >&2; }

[ $# -eq 2 ] || usage
suite=$1
case "$suite" in bookworm|trixie|sid) ;; *) die "unknown suite '$suite' (known: bookworm, trixie, sid)" 2 ;; esac
[ -n "$2" ] || usage
dir=$(realpath -m -- "$2")
[ "$dir" != / ] || die "refusing to make a root filesystem in /" 2

cache=${TF_RECIPES_ROOTFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-recipes/rootfs}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
tarball=$cache/$suite.tar
marker=$dir/etc/tf-recipes-rootfs  # "SUITE", written last: the tree is whole and was made here

if [ -f "$marker" ]; then
    [ "$(cat "$marker")" = "$suite" ] || die "$dir already holds a $(cat "$marker") root filesystem, not $suite"
    log "$dir already holds a $suite root filesystem"
    exit 0
fi
if [ -e "$dir" ] && { [ ! -d "$dir" ] || [ -n "$(ls -A "$dir")" ]; }; then
    die "$dir exists and is not an empty folder; give an absent or empty DIR"
fi
[ "$(id -u)" -eq 0 ] || die "root is needed (debootstrap, device nodes, file owners); try: sudo $0 $*"

if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || die "no debootstrap on PATH (apt-get install debootstrap debian-archive-keyring)"
    [ -f "$keyring" ] || die "no $keyring to check Debian's archive with (apt-get install debian-archive-keyring)"
    mkdir -p "$cache"
    build=$(mktemp -d "$cache/.$suite.XXXXXX")
    # debootstrap mounts /proc and /sys in the tree while it works: unmount what an interruption left
    # there, and never delete across a mount.
    cleanup() {
        local mount
        while read -r mount; do umount -l "$mount" || true; done \
            < <(awk -v tree="$build/" 'index($2, tree) == 1 {print $2}' /proc/mounts | sort -r)
        rm -rf --one-file-system "$build" "$tarball.partial"
    }
    trap cleanup EXIT
    log "debootstrap $suite from $mirror (about a minute)"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates --keyring="$keyring" \
        "$suite" "$build" "$mirror" >"$build.log" 2>&1 \
        || { tail -n 20 "$build.log" >&2; die "debootstrap $suite failed; its log: $build.log"; }
    rm -f "$build.log"
    tar -C "$build" --numeric-owner -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    log "kept $tarball"
fi

log "extracting $tarball into $dir"
mkdir -p "$dir"
tar -C "$dir" --numeric-owner -xpf "$tarball"
echo "$suite" >"$marker"
log "ready: $dir ($suite)"
