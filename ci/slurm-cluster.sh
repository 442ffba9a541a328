#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (munged, slurmctld and slurmd on localhost), so that
# tests/integration/test_slurm_cluster.py can submit the scripts `invoke sbatch` renders to a real scheduler.
# Debian 12, as root. Safe to run again: it installs, writes and starts only what is missing, and
# returns once `sinfo` shows the node idle.
#
#   bash ci/slurm-cluster.sh
#   SLURM_CLUSTER_TIMEOUT=180 bash ci/slurm-cluster.sh    # seconds to wait for the daemons (default 90)
#
# The cluster: one node named `hostname -s` with the CPUs and memory `slurmd -C` reads from the
# machine, one partition `debug`, munge authentication, no accounting database. Processes are
# tracked through /proc (proctrack/linuxproc) and tasks are not bound (task/none): neither needs
# systemd or a writable cgroup hierarchy, which containers and CI machines often lack.
# Files: /etc/slurm/slurm.conf, /etc/munge/munge.key, logs in /var/log/slurm/, state in /var/lib/slurm/.
# Stop it with: kill $(cat /run/slurmd.pid) $(cat /run/slurmctld.pid)
set -euo pipefail

TIMEOUT=${SLURM_CLUSTER_TIMEOUT:-90}
CONF=/etc/slurm/slurm.conf
MARK="# One-node tf-recipes test cluster, written by ci/slurm-cluster.sh; it rewrites this file."
LOGS=/var/log/slurm
STATE=/var/lib/slurm
DEADLINE=$((SECONDS + TIMEOUT))

log() { printf '[slurm-cluster] %s\n' "$*" >&2; }
die() { printf '[slurm-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

show_logs() {
  local file
  for file in "$LOGS/slurmctld.log" "$LOGS/slurmd.log" /var/log/munge/munged.log; do
    [[ -f $file ]] && { printf -- '--- last lines of %s ---\n' "$file" >&2; tail -n 15 "$file" >&2; }
  done
  return 0
}

# wait_for DESCRIPTION COMMAND...: retry COMMAND until it succeeds or the overall deadline passes.
wait_for() {
  local what=$1
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= DEADLINE)); then
      show_logs
      die "timed out after ${TIMEOUT}s waiting for $what (raise SLURM_CLUSTER_TIMEOUT, or read the logs above)"
    fi
    sleep 1
  done
}

# running NAME PIDFILE: a process called NAME runs with the pid in PIDFILE.
running() {
  local pid
  pid=$(cat "$2" 2>/dev/null) || return 1
  [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]]
}

munge_works() { munge -n | unmunge; }

node_state() { sinfo --noheader --nodes="$HOST" --Node --format=%T 2>/dev/null | head -n 1; }

node_idle() { [[ $(node_state) == idle ]]; }

[[ $(id -u) == 0 ]] || die "run as root: this installs packages and starts system daemons"

# -- 1. packages ------------------------------------------------------------------------------------
missing=()
for program in munged munge slurmctld slurmd sbatch srun sinfo scontrol; do
  command -v "$program" >/dev/null || missing+=("$program")
done
if ((${#missing[@]})); then
  log "installing slurm-wlm and munge (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
else
  log "slurm-wlm and munge are installed ($(slurmctld -V))"
fi

# -- 2. munge: key and daemon -----------------------------------------------------------------------
if [[ ! -s /etc/munge/munge.key ]]; then
  log "creating /etc/munge/munge.key"
  install -d -o munge -g munge -m 0700 /etc/munge
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
if munge_works >/dev/null 2>&1; then
  log "munged is running"
else
  log "starting munged"
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged
  wait_for "munged to answer (munge -n | unmunge)" munge_works
fi

# -- 3. slurm.conf ----------------------------------------------------------------------------------
HOST=$(hostname -s)
[[ -n $HOST ]] || die "hostname -s printed nothing; give the machine a host name"
# Job steps and TensorFlow's SlurmClusterResolver address tasks by node name, so it must resolve.
if ! getent hosts "$HOST" >/dev/null; then
  log "adding '127.0.1.1 $HOST' to /etc/hosts: the node name $HOST does not resolve"
  printf '127.0.1.1\t%s\n' "$HOST" >>/etc/hosts
fi
# `slurmd -C` prints the node line this machine really has (CPUs, sockets, cores, RealMemory in MiB);
# a node configured with more than it has would be drained.
node_line=$(slurmd -C | grep '^NodeName=') || die "slurmd -C could not read this machine's CPUs and memory"
node_line=${node_line#NodeName=* }

wanted=$(cat <<EOF
$MARK
ClusterName=tf-recipes
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=600
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 $node_line State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
)

if [[ -f $CONF ]] && ! grep -qxF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script; move it away to let this script write its own"
fi
if [[ -f $CONF && $(cat "$CONF") == "$wanted" ]]; then
  log "$CONF is up to date"
else
  log "writing $CONF (node $HOST: $node_line)"
  install -d -m 0755 /etc/slurm
  printf '%s\n' "$wanted" >"$CONF"
  # Daemons started with an older configuration restart below.
  for daemon in slurmd slurmctld; do
    if running "$daemon" "/run/$daemon.pid"; then
      log "stopping $daemon (pid $(cat "/run/$daemon.pid")) to load the new configuration"
      kill "$(cat "/run/$daemon.pid")"
      wait_for "$daemon to stop" eval "! running $daemon /run/$daemon.pid"
    fi
  done
fi
install -d -o slurm -g slurm -m 0755 "$LOGS" "$STATE/slurmctld"
install -d -m 0755 "$STATE/slurmd"

# -- 4. daemons -------------------------------------------------------------------------------------
# Both fork into the background and write their pid files; they outlive this script.
if running slurmctld /run/slurmctld.pid; then
  log "slurmctld is running (pid $(cat /run/slurmctld.pid))"
else
  log "starting slurmctld (log $LOGS/slurmctld.log)"
  slurmctld || { show_logs; die "slurmctld did not start"; }
  wait_for "slurmctld to answer (scontrol ping)" eval 'scontrol ping | grep -q UP'
fi
if running slurmd /run/slurmd.pid; then
  log "slurmd is running (pid $(cat /run/slurmd.pid))"
else
  log "starting slurmd (log $LOGS/slurmd.log)"
  slurmd || { show_logs; die "slurmd did not start"; }
fi

# -- 5. wait for the node ---------------------------------------------------------------------------
resumed=no
until node_idle; do
  state=$(node_state)
  # A node left down or drained by an earlier configuration comes back once slurmd has registered.
  if [[ $resumed == no && $state =~ ^(down|drained|draining)$ ]]; then
    log "node $HOST is $state: resuming it"
    scontrol update NodeName="$HOST" State=RESUME || true
    resumed=yes
  fi
  if ((SECONDS >= DEADLINE)); then
    show_logs
    sinfo -N -l >&2 || true
    die "timed out after ${TIMEOUT}s waiting for node $HOST to be idle (state: ${state:-unknown})"
  fi
  sleep 1
done
log "ready: node $HOST is idle in partition debug ($(sinfo --noheader --format='%c CPUs, %m MiB' | head -n 1)); took ${SECONDS}s"
