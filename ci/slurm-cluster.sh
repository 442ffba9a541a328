#!/usr/bin/env bash
# A SLURM cluster of N nodes on this machine (default 2), so that the tests in tests/integration can submit
# the scripts `invoke sbatch` renders to a real scheduler, on one node or several. Debian 12, as root. Safe to run again: it installs, writes and starts only what is missing,
# and returns once `sinfo` shows every node up (idle, or running jobs).
#
#   bash ci/slurm-cluster.sh                 # 2 nodes, what the test suite uses
#   bash ci/slurm-cluster.sh 3               # N nodes (1 to 200)
#   SLURM_CLUSTER_TIMEOUT=180 bash ci/slurm-cluster.sh    # seconds to wait for the daemons (default 90)
#
# The cluster: munged, one slurmctld, and one slurmd per node, named tfr-node1 ... tfr-nodeN. Each node
# has its own network stack and address, as real nodes do, so that tasks on different nodes can listen on
# the same port (SlurmClusterResolver gives every node the same ports): a bridge tfr-br0 holds
# 10.231.99.1/24 and is tfr-node1 (the host itself, where slurmctld also listens); tfr-nodeK (K >= 2) is
# the network namespace tfr-nodeK, joined to the bridge by a veth pair, with 10.231.99.K. Its slurmd starts
# with `nsenter --net=/run/netns/tfr-nodeK slurmd -N tfr-nodeK` (not `ip netns exec`, which remounts /sys:
# slurmd then dies with "No filesystem mounted on /sys/fs/cgroup"). /etc/hosts gets a line per node
# (srun and TensorFlow's SlurmClusterResolver address tasks by node name). The nodes share the machine's
# file system, users and CPUs: each reports the CPUs and memory `slurmd -C` reads from the machine, so
# the tasks of two nodes may be bound to the same core.
# One partition `debug`, munge authentication, no accounting database. Processes are tracked through
# /proc (proctrack/linuxproc) and tasks are bound to the CPUs SLURM gives them with sched_setaffinity
# (task/affinity): neither needs systemd or a writable cgroup hierarchy, which containers and CI machines
# often lack. `srun --mpi=pmix` works: the package libpmix-dev ships the libpmix.so SLURM's plugin loads.
# Files: /etc/slurm/slurm.conf, /etc/munge/munge.key, the marked lines of /etc/hosts, logs in
# /var/log/slurm/ (slurmctld.log, slurmd-NODE.log), state in /var/lib/slurm/; with more than 2 nodes, an
# iptables rule that lets the bridge forward between them.
# A configuration change (another N) restarts the daemons; it is refused while jobs are in the queue.
# Stop it with: kill $(cat /run/slurmd-tfr-node*.pid) $(cat /run/slurmctld.pid)
set -euo pipefail

NODES=${1:-2}
TIMEOUT=${SLURM_CLUSTER_TIMEOUT:-90}
CONF=/etc/slurm/slurm.conf
MARK="# tf-recipes test cluster, written by ci/slurm-cluster.sh; it rewrites this file."
OLD_MARK="# One-node tf-recipes test cluster, written by ci/slurm-cluster.sh; it rewrites this file."
HOSTS_MARK="# ci/slurm-cluster.sh"
PREFIX=tfr-node
BRIDGE=tfr-br0
SUBNET=10.231.99  # node K is $SUBNET.K/24
LOGS=/var/log/slurm
STATE=/var/lib/slurm
DEADLINE=$((SECONDS + TIMEOUT))

log() { printf '[slurm-cluster] %s\n' "$*" >&2; }
die() { printf '[slurm-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ! $NODES =~ ^[1-9][0-9]*$ ]] || ((NODES > 200)); then
  die "NODES '$NODES' must be a number of nodes from 1 to 200"
fi
(($# <= 1)) || die "one argument at most, the number of nodes (got: $*)"

show_logs() {
  local file
  for file in "$LOGS/slurmctld.log" "$LOGS"/slurmd-"$PREFIX"*.log /var/log/munge/munged.log; do
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

# stop NAME PIDFILE: stop that process, if it runs, and wait until it is gone.
stop() {
  running "$1" "$2" || return 0
  log "stopping $1 (pid $(cat "$2"), $2)"
  kill "$(cat "$2")"
  wait_for "$1 ($2) to stop" eval "! running $1 $2"
}

munge_works() { munge -n | unmunge; }

node_name() { printf '%s%d' "$PREFIX" "$1"; }

# The nodes' states, one "NAME STATE" line each.
node_states() { sinfo --noheader --Node --format='%N %T' 2>/dev/null | sort -u; }

# Every node answers and takes jobs: idle, or running some already.
all_up() {
  local states
  states=$(node_states)
  (($(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$states") == NODES))
}

[[ $(id -u) == 0 ]] || die "run as root: this installs packages, makes network namespaces and starts system daemons"

# -- 1. packages ------------------------------------------------------------------------------------
# program -> the Debian package that ships it; libpmix.so (for srun --mpi=pmix) comes with libpmix-dev.
declare -A package_of=([munged]=munge [munge]=munge [slurmctld]=slurm-wlm [slurmd]=slurm-wlm [sbatch]=slurm-wlm
                       [srun]=slurm-wlm [sinfo]=slurm-wlm [scontrol]=slurm-wlm [squeue]=slurm-wlm [ip]=iproute2
                       [nsenter]=util-linux)
missing=()
packages=()
for program in "${!package_of[@]}"; do
  command -v "$program" >/dev/null && continue
  missing+=("$program")
  [[ " ${packages[*]} " == *" ${package_of[$program]} "* ]] || packages+=("${package_of[$program]}")
done
if [[ $(dpkg-query -W -f='${Status}' libpmix-dev 2>/dev/null) != "install ok installed" ]]; then
  missing+=("libpmix.so")
  packages+=(libpmix-dev)
fi
if ((${#packages[@]})); then
  log "installing ${packages[*]} (missing: ${missing[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
else
  log "slurm-wlm, munge and libpmix-dev are installed ($(slurmctld -V))"
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

# -- 3. slurm.conf (written in step 6) --------------------------------------------------------------
HOST=$(hostname -s)
[[ -n $HOST ]] || die "hostname -s printed nothing; give the machine a host name"
# `slurmd -C` prints the node line this machine really has (CPUs, sockets, cores, RealMemory in MiB);
# a node configured with more than it has would be drained.
node_line=$(slurmd -C | grep '^NodeName=') || die "slurmd -C could not read this machine's CPUs and memory"
node_line=${node_line#NodeName=* }
node_list="${PREFIX}1"
((NODES == 1)) || node_list="${PREFIX}[1-$NODES]"

wanted=$(cat <<EOF
$MARK
# $NODES node(s): $node_list, each in its own network namespace (tfr-node1 is the host) on $SUBNET.0/24.
ClusterName=tf-recipes
SlurmctldHost=$HOST($SUBNET.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits this long before it starts again (default 120 s): 30 s keeps the requeue test
# short and still gives a step on a busy machine time to launch with its credential.
AuthInfo=cred_expire=30
# slurmd answers srun's request to end a step (--kill-on-bad-exit, after the first task's status 143)
# only once the step has ended; on this busy machine that took over 10 s, the default MessageTimeout.
# slurmctld then sends the request again a minute later, when the requeued job (which waits only
# cred_expire=30 s) already runs a step of the same number, and ends it. 60 s is more than KillWait (30 s),
# after which every step is killed.
MessageTimeout=60
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
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
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
# srun --mpi=pmix makes a folder per step and node under TmpFS; the nodes share /tmp, so each has its own.
TmpFS=$STATE/tmp-%n
MailProg=/bin/true
EOF
)
for ((k = 1; k <= NODES; k++)); do
  wanted+=$'\n'"NodeName=$(node_name "$k") NodeAddr=$SUBNET.$k $node_line State=UNKNOWN"
done
wanted+=$'\n'"PartitionName=debug Nodes=$node_list Default=YES MaxTime=INFINITE State=UP"

if [[ -f $CONF ]] && ! grep -qxF -e "$MARK" -e "$OLD_MARK" "$CONF"; then
  die "$CONF exists and was not written by this script; move it away to let this script write its own"
fi
conf_changed=no
[[ -f $CONF && $(cat "$CONF") == "$wanted" ]] || conf_changed=yes

# -- 4. a new configuration: stop what runs the old one ---------------------------------------------
if [[ $conf_changed == yes ]]; then
  if running slurmctld /run/slurmctld.pid; then
    queued=$(squeue --noheader --format='%i %T' 2>/dev/null | tr '\n' ' ')
    [[ -z $queued ]] || die "$CONF must change to $NODES node(s), which restarts the daemons, and jobs are queued (${queued% }); scancel them or wait, then run this again"
  fi
  # Every slurmd this script started: the one-node layout's /run/slurmd.pid, and one per node.
  for pidfile in /run/slurmd.pid /run/slurmd-"$PREFIX"*.pid; do
    [[ -e $pidfile ]] && stop slurmd "$pidfile"
  done
  stop slurmctld /run/slurmctld.pid
fi

# -- 5. network: the bridge, a namespace per node, /etc/hosts ---------------------------------------
if ip -o -4 addr show | grep -v " $BRIDGE " | grep -q " inet $SUBNET\."; then
  die "another interface already has an address in $SUBNET.0/24 ($(ip -o -4 addr show | grep " inet $SUBNET\." | awk '{print $2, $4}' | head -n 1)); free that subnet"
fi
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  log "creating bridge $BRIDGE with $SUBNET.1/24 (node $(node_name 1))"
  ip link add "$BRIDGE" type bridge
fi
# With br_netfilter loaded (Docker loads it), frames between nodes 2..N cross the bridge through
# iptables' FORWARD chain, whose policy Docker sets to DROP: they need a rule of their own (Docker adds
# the same for docker0). Traffic between the host (node 1) and a namespace does not cross that chain.
if ((NODES > 2)) && command -v iptables >/dev/null && ! iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null; then
  log "letting nodes 2..$NODES reach each other across $BRIDGE (iptables -I FORWARD -i $BRIDGE -o $BRIDGE -j ACCEPT)"
  iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
fi
ip -o -4 addr show dev "$BRIDGE" | grep -q " inet $SUBNET\.1/24 " || ip addr add "$SUBNET.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
declare -A new_namespace=()
for ((k = 2; k <= NODES; k++)); do
  name=$(node_name "$k")
  veth=tfr-veth$k
  if [[ ! -e /run/netns/$name ]] || ! ip link show "$veth" >/dev/null 2>&1; then
    log "creating network namespace $name with $SUBNET.$k, joined to $BRIDGE by $veth"
    ip netns delete "$name" 2>/dev/null || true
    ip link delete "$veth" 2>/dev/null || true
    ip netns add "$name"
    ip link add "$veth" type veth peer name eth0 netns "$name"
    new_namespace[$name]=yes
  fi
  ip link set "$veth" master "$BRIDGE" up
  ip -n "$name" -o -4 addr show dev eth0 | grep -q " inet $SUBNET\.$k/24 " || ip -n "$name" addr add "$SUBNET.$k/24" dev eth0
  ip -n "$name" link set eth0 up
  ip -n "$name" link set lo up
done
# Namespaces of nodes beyond N (a larger cluster before): their slurmds were stopped in step 4.
for path in /run/netns/"$PREFIX"*; do
  [[ -e $path ]] || continue
  k=${path##*/"$PREFIX"}
  if [[ ! $k =~ ^[0-9]+$ ]] || ((k > NODES)); then
    log "removing network namespace ${path##*/} (not a node of this cluster)"
    ip netns delete "${path##*/}"
    ip link delete "tfr-veth$k" 2>/dev/null || true
  fi
done

hosts_wanted=$(grep -vF "$HOSTS_MARK" /etc/hosts || true)
# Job steps and TensorFlow's SlurmClusterResolver address tasks by node name, so each must resolve.
for ((k = 1; k <= NODES; k++)); do
  hosts_wanted+=$'\n'"$SUBNET.$k	$(node_name "$k")	$HOSTS_MARK"
done
if [[ $(cat /etc/hosts) != "$hosts_wanted" ]]; then
  log "writing the lines of /etc/hosts for $node_list"
  printf '%s\n' "$hosts_wanted" >/etc/hosts  # in place: /etc/hosts may be a mount point
fi
for ((k = 1; k <= NODES; k++)); do
  resolved=$(getent hosts "$(node_name "$k")" | awk '{print $1; exit}')
  [[ $resolved == "$SUBNET.$k" ]] ||
    die "node name $(node_name "$k") resolves to '${resolved:-nothing}', not $SUBNET.$k; remove its other line from /etc/hosts"
done

# -- 6. slurm.conf ----------------------------------------------------------------------------------
if [[ $conf_changed == yes ]]; then
  log "writing $CONF ($NODES node(s), each: $node_line)"
  install -d -m 0755 /etc/slurm
  printf '%s\n' "$wanted" >"$CONF"
else
  log "$CONF is up to date ($NODES node(s))"
fi
install -d -o slurm -g slurm -m 0755 "$LOGS" "$STATE/slurmctld"

# -- 7. daemons -------------------------------------------------------------------------------------
# All fork into the background and write their pid files; they outlive this script.
if running slurmctld /run/slurmctld.pid; then
  log "slurmctld is running (pid $(cat /run/slurmctld.pid))"
else
  log "starting slurmctld (log $LOGS/slurmctld.log)"
  slurmctld || { show_logs; die "slurmctld did not start"; }
  wait_for "slurmctld to answer (scontrol ping)" eval 'scontrol ping | grep -q UP'
fi
for ((k = 1; k <= NODES; k++)); do
  name=$(node_name "$k")
  pidfile=/run/slurmd-$name.pid
  # A slurmd left in a namespace that was just made again has lost its network: start it anew.
  [[ -z ${new_namespace[$name]:-} ]] || stop slurmd "$pidfile"
  if running slurmd "$pidfile"; then
    log "slurmd $name is running (pid $(cat "$pidfile"))"
    continue
  fi
  install -d -m 0755 "$STATE/slurmd-$name"
  install -d -m 1777 "$STATE/tmp-$name"
  log "starting slurmd $name at $SUBNET.$k (log $LOGS/slurmd-$name.log)"
  if ((k == 1)); then
    slurmd -N "$name" || { show_logs; die "slurmd $name did not start"; }
  else
    nsenter --net="/run/netns/$name" slurmd -N "$name" || { show_logs; die "slurmd $name did not start"; }
  fi
done

# -- 8. wait for the nodes --------------------------------------------------------------------------
resumed=no
until all_up; do
  states=$(node_states)
  # Nodes left down or drained by an earlier configuration come back once their slurmd has registered.
  stuck=$(awk '$2 ~ /^(down|drained|draining)/ {print $1}' <<<"$states" | paste -sd, -)
  if [[ $resumed == no && -n $stuck ]]; then
    log "nodes $stuck are not idle: resuming them"
    scontrol update NodeName="$stuck" State=RESUME || true
    resumed=yes
  fi
  if ((SECONDS >= DEADLINE)); then
    show_logs
    sinfo -N -l >&2 || true
    die "timed out after ${TIMEOUT}s waiting for $node_list to be up (states: $(tr '\n' ' ' <<<"$states"))"
  fi
  sleep 1
done
log "ready: $node_list up in partition debug ($(sinfo --noheader --Node --format='%c CPUs, %m MiB' | head -n 1) each); took ${SECONDS}s"
