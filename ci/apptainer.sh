#!/usr/bin/env bash
# Make an `apptainer` command work on this machine, for `invoke build|run --runtime apptainer`, the
# nightly's apptainer cells and tests/integration/test_apptainer.py. Exits 0 at once when
# `apptainer version` already answers.
#
#   bash ci/apptainer.sh
#
# Where the distribution packages Apptainer (`apt-cache policy apptainer` names a candidate), it
# installs the package. Debian 12 has none, and Debian unstable's (1.4.5) needs a newer C library, so
# there, as root, it:
#   1. makes a Debian unstable root file system in ROOT (`ci/debian-rootfs.sh sid`: debootstrap, about
#      25 s the first time, then its cached tarball) and installs apptainer and the FUSE drivers it
#      mounts images with (squashfuse, fuse3, fuse2fs, gocryptfs) in it;
#   2. adds the unprivileged user Apptainer runs as (`tf-recipes`, uid UID) to ROOT's /etc/passwd;
#   3. writes WRAPPER, an `apptainer` command that runs ROOT's Apptainer on this machine's files.
#
# On every call the wrapper, as root:
#   - enters a mount namespace of its own (`unshare --mount`) and bind-mounts ROOT onto itself, then
#     /dev, /proc, /sys, /etc/hosts, /etc/resolv.conf and every top-level folder of this machine that
#     is not the operating system's (/tmp, /root, /home, /work, /opt, /srv, /mnt, ...: the repository,
#     results and data) into it at the same paths, plus the folders in TF_RECIPES_APPTAINER_BINDS;
#   - switches to ROOT with `pivot_root` (Apptainer refuses a plain chroot: "weak chrooted environment");
#   - runs Apptainer in a user namespace in which the caller is the unprivileged UID
#     (`unshare --user --map-user=UID`). Apptainer then works in its user-namespace mode, as it does for
#     any user on an HPC site (as root it aborts on machines without CAP_SYS_RESOURCE, such as this
#     project's CI machine), and what the job writes lands on this machine's folders owned by the caller,
#     as a site user's results are theirs. Nothing is chowned afterwards, and the job cannot write
#     where the caller could not.
#
# Idempotent: ROOT, its packages, the user and WRAPPER are made only when missing or out of date, and
# a second run returns in about a second. It deletes nothing; a ROOT or WRAPPER it did not make is
# refused with one line. Needs root, debootstrap and util-linux (unshare, pivot_root) on Debian 12.
#
# Environment:
#   TF_RECIPES_APPTAINER_ROOT     the root file system (default /var/lib/tf-recipes/apptainer-sid)
#   TF_RECIPES_APPTAINER_WRAPPER  the `apptainer` command it writes (default /usr/local/bin/apptainer)
#   TF_RECIPES_APPTAINER_UID      the uid Apptainer runs as (default 4242)
#   TF_RECIPES_APPTAINER_BINDS    read by the wrapper on every call: more host folders to bind-mount,
#                                 absolute paths separated by spaces (say, a data set under /var)
#   TF_RECIPES_ROOTFS_CACHE, DEBIAN_MIRROR   as for ci/debian-rootfs.sh
set -euo pipefail

ROOT=${TF_RECIPES_APPTAINER_ROOT:-/var/lib/tf-recipes/apptainer-sid}
WRAPPER=${TF_RECIPES_APPTAINER_WRAPPER:-/usr/local/bin/apptainer}
UID_INSIDE=${TF_RECIPES_APPTAINER_UID:-4242}
# squashfuse mounts a SIF (without it every run unpacks the whole image first); fuse3 unmounts it;
# fuse2fs and gocryptfs are Apptainer's other unprivileged image drivers (overlay images, encrypted SIFs).
PACKAGES=(apptainer squashfuse fuse3 fuse2fs gocryptfs)
USER_NAME=tf-recipes
USER_HOME=/var/lib/tf-recipes-home
WRAPPER_MARK="# tf-recipes: Apptainer from a Debian unstable root file system, written by ci/apptainer.sh"
# Written last into ROOT: the packages it holds are installed and its user added.
MARKER=$ROOT/etc/tf-recipes-apptainer

log() { printf '[apptainer] %s\n' "$*" >&2; }
die() { printf '[apptainer] ERROR: %s\n' "$*" >&2; exit 1; }

apptainer_works() { command -v apptainer >/dev/null 2>&1 && apptainer version >/dev/null 2>&1; }

if apptainer_works; then
  log "apptainer $(apptainer version) works ($(command -v apptainer)); nothing to do"
  exit 0
fi
[[ $(id -u) == 0 ]] || die "run as root: this installs packages and writes $WRAPPER"
[[ $UID_INSIDE =~ ^[1-9][0-9]*$ ]] || die "TF_RECIPES_APPTAINER_UID=$UID_INSIDE: give a uid other than 0"
export DEBIAN_FRONTEND=noninteractive

# -- a distribution with a package ------------------------------------------------------------------
candidate() { apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" {print $2}'; }
candidate=$(candidate apptainer)
if [[ -n $candidate ]]; then
  wanted=(apptainer)
  for package in squashfuse fuse3; do
    if [[ -n $(candidate "$package") ]]; then wanted+=("$package"); fi
  done
  log "installing the distribution's apptainer $candidate (${wanted[*]})"
  apt-get install -y -q --no-install-recommends "${wanted[@]}" >/dev/null || die "apt-get install ${wanted[*]} failed"
  apptainer_works || die "apptainer $candidate is installed but 'apptainer version' fails"
  log "ready: apptainer $(apptainer version) ($(command -v apptainer)); took ${SECONDS}s"
  exit 0
fi

# -- Debian 12: Apptainer in a Debian unstable root file system --------------------------------------
for program in unshare pivot_root chroot mount; do
  command -v "$program" >/dev/null || die "no $program on PATH (apt-get install util-linux mount coreutils)"
done
if [[ -e $WRAPPER ]] && ! grep -qxF "$WRAPPER_MARK" "$WRAPPER"; then
  die "$WRAPPER exists and was not written by this script; move it away or set TF_RECIPES_APPTAINER_WRAPPER"
fi
if [[ -f $MARKER ]] && grep -qF "packages: ${PACKAGES[*]};" "$MARKER"; then
  log "$ROOT already holds $(cat "$MARKER")"
else
  if [[ ! -f $ROOT/etc/tf-recipes-rootfs ]]; then
    command -v debootstrap >/dev/null || { log "installing debootstrap"; apt-get install -y -q debootstrap debian-archive-keyring >/dev/null; }
  fi
  bash "$(dirname "$0")/debian-rootfs.sh" sid "$ROOT"
  [[ $(cat "$ROOT/etc/tf-recipes-rootfs") == sid ]] || die "$ROOT holds no Debian unstable root file system"
  log "installing ${PACKAGES[*]} in $ROOT (Debian unstable)"
  # In a mount namespace of its own, so the /proc that apt's scripts need goes away with it.
  # shellcheck disable=SC2016  # expanded by the inner shell, from its arguments
  unshare --mount --propagation private -- /bin/sh -ec '
    mount -t proc proc "$1/proc"
    cp /etc/resolv.conf "$1/etc/resolv.conf" 2>/dev/null || true
    shift
    chroot "$0" /bin/sh -ec "apt-get -q -o Acquire::Check-Valid-Until=false update && apt-get install -y -q --no-install-recommends $*"
  ' "$ROOT" "$ROOT" "${PACKAGES[@]}" >"$ROOT.install.log" 2>&1 \
    || { tail -n 15 "$ROOT.install.log" >&2; die "installing ${PACKAGES[*]} in $ROOT failed; its log: $ROOT.install.log"; }
  rm -f "$ROOT.install.log"
  version=$(chroot "$ROOT" dpkg-query -W apptainer | cut -f 2) || die "no apptainer package in $ROOT"
  # The user Apptainer runs as, and its home; pivot_root puts the old root under /.tf-recipes-host.
  if ! grep -q "^$USER_NAME:" "$ROOT/etc/passwd"; then
    printf '%s:x:%s:%s:tf-recipes Apptainer user:%s:/bin/sh\n' "$USER_NAME" "$UID_INSIDE" "$UID_INSIDE" "$USER_HOME" >>"$ROOT/etc/passwd"
    printf '%s:x:%s:\n' "$USER_NAME" "$UID_INSIDE" >>"$ROOT/etc/group"
  fi
  mkdir -p "$ROOT$USER_HOME" "$ROOT/.tf-recipes-host"
  echo "apptainer $version; packages: ${PACKAGES[*]}; user $USER_NAME ($UID_INSIDE)" >"$MARKER"
  log "installed $(cat "$MARKER")"
fi
uid_in_root=$(awk -F: -v name="$USER_NAME" '$1 == name {print $3}' "$ROOT/etc/passwd")

# -- the wrapper ---------------------------------------------------------------------------------------
log "writing $WRAPPER (Apptainer runs as $USER_NAME, uid $uid_in_root, in user-namespace mode)"
mkdir -p "$(dirname "$WRAPPER")"
cat >"$WRAPPER.partial" <<EOF
#!/bin/bash
$WRAPPER_MARK
# (it rewrites this file; its header says what this does). Installed: $(cat "$MARKER").
set -euo pipefail
root=$ROOT
uid=$uid_in_root
EOF
cat >>"$WRAPPER.partial" <<'EOF'
fail() { echo "apptainer (ci/apptainer.sh): error: $*" >&2; exit 1; }

if [[ ${1:-} != --tf-recipes-entered ]]; then
  [[ $(id -u) == 0 ]] || fail "this apptainer enters $root with unshare and pivot_root, which needs root; run it as root"
  [[ -x $root/usr/bin/apptainer ]] || fail "no Apptainer in $root; run: bash ci/apptainer.sh"
  exec unshare --mount --propagation private -- "$BASH" "$0" --tf-recipes-entered "$PWD" "$@"
fi
here=$2
shift 2

# This machine's folders at their own paths: all but the operating system's, plus TF_RECIPES_APPTAINER_BINDS.
folders=()
for path in /*; do
  [[ -d $path && ! -L $path ]] || continue
  case ${path#/} in bin | boot | dev | etc | lib | lib32 | lib64 | libx32 | lost+found | proc | run | sbin | sys | usr | var) continue ;; esac
  folders+=("$path")
done
for path in ${TF_RECIPES_APPTAINER_BINDS:-}; do
  [[ $path == /?* && -d $path ]] || fail "TF_RECIPES_APPTAINER_BINDS: '$path' is not an absolute path to a folder"
  folders+=("$path")
done

mount --bind "$root" "$root"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc" 2>/dev/null || mount --rbind /proc "$root/proc"
mount --rbind /sys "$root/sys"
for file in /etc/hosts /etc/resolv.conf; do
  if [[ -f $file ]]; then
    [[ -e $root$file ]] || : >"$root$file"
    mount --bind "$file" "$root$file"
  fi
done
for path in "${folders[@]}"; do
  mkdir -p "$root$path"
  mount --rbind "$path" "$root$path"
done
cd "$root"
pivot_root . .tf-recipes-host
umount -l /.tf-recipes-host
cd "$here" 2>/dev/null || cd /
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec unshare --user --map-user="$uid" --map-group="$uid" -- /usr/bin/apptainer "$@"
EOF
chmod 0755 "$WRAPPER.partial"
mv "$WRAPPER.partial" "$WRAPPER"

# -- check -----------------------------------------------------------------------------------------------
found=$(command -v apptainer || true)
[[ $found == "$WRAPPER" ]] || die "'apptainer' on PATH is ${found:-nothing}, not $WRAPPER; put $(dirname "$WRAPPER") first on PATH"
version=$(apptainer version 2>&1) || die "$WRAPPER does not run: $version"
log "ready: apptainer $version ($WRAPPER, root file system $ROOT); took ${SECONDS}s"
