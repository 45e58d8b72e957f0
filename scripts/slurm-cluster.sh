#!/usr/bin/env bash
# A real two-node Slurm cluster on this machine, for gridml's tests and benchmarks (and to try the
# slurm executor). Debian's slurm-wlm (slurmctld, slurmd, munge), installed with apt if missing.
#
#   scripts/slurm-cluster.sh start DIR      # idempotent; prints `export SLURM_CONF=...` (eval it)
#   scripts/slurm-cluster.sh stop DIR       # stops every daemon, removes the namespaces and links
#   scripts/slurm-cluster.sh status DIR     # daemons alive? + sinfo
#   scripts/slurm-cluster.sh env DIR        # the export lines again
#   scripts/slurm-cluster.sh node-stop DIR NODE   # kill -9 one slurmd (a lost node: NODE_FAIL)
#   scripts/slurm-cluster.sh node-start DIR NODE  # start it again (ReturnToService=2 takes it back)
#   scripts/slurm-cluster.sh cut-home DIR   # the nodes reach slurmctld only ("no route" to the rest)
#   scripts/slurm-cluster.sh mend-home DIR  # undo cut-home
#   scripts/slurm-cluster.sh node-run DIR NODE CMD...  # CMD in NODE's network namespace
#
# Everything lives in DIR: slurm.conf, munge key and socket, state, spools, logs, pids. The two
# compute nodes n1, n2 are network namespaces created here, linked to a bridge on this machine by
# veth pairs, with addresses from 198.18.0.0/15 chosen from a hash of DIR (two clusters at once do
# not collide); slurmctld listens on the bridge address under this machine's hostname. One munged
# serves both nodes. Memory is enforced as at a site: task/cgroup on the cgroup v1 memory controller
# (DIR/etc/cgroup.conf: CgroupPlugin=cgroup/v1, ConstrainRAMSpace=yes, AllowedRAMSpace=100, and
# ConstrainSwapSpace=yes, AllowedSwapSpace=0 where swap is accounted) with memory a consumable
# resource (CR_Core_Memory, DefMemPerCPU=512 for jobs without --mem; without it Slurm hands the
# job no limit), so a job over its --mem is killed by the kernel's OOM killer and ends
# OUT_OF_MEMORY. Nodes declare RealMemory (half of this machine's each). The two slurmd do not
# collide: Debian's build has MULTIPLE_SLURMD, whose cgroups are
# /sys/fs/cgroup/memory/slurm_<node>/uid_U/job_J/step_S; two clusters at once (two pytest workers)
# share that tree, so each DIR numbers its jobs from its own FirstJobId (blocks of 10,000), and
# `stop` removes what its killed jobs left there. Where no writable v1 memory controller is mounted
# at /sys/fs/cgroup/memory (a cgroup v2-only host, an unprivileged container) the script falls back
# to task/none and CR_Core: no memory limit, no OUT_OF_MEMORY (the test in
# tests/slurm/test_slurm_accounting.py skips, saying why). proctrack/linuxproc either way.
# Accounting as at a real site: slurmdbd on a MariaDB of its own (Debian's mariadb-server, data in
# DIR/db, listening on 127.0.0.1 only, on a free port; slurmdbd too), jobacct_gather/linux (/proc),
# MinJobAge=5: a finished job leaves squeue 5 s after its end and only `sacct` knows it then.
# jobcomp/filetxt keeps a record in DIR/log/jobcomp.txt too. SlurmdTimeout=10: a killed slurmd turns
# its job into NODE_FAIL in about 30 s. Needs root (namespaces, bridge). Partitions: "gridml" (the
# default) and "urgent" on the same nodes, whose jobs preempt gridml's (PreemptType=
# preempt/partition_prio, PreemptMode=REQUEUE: a requeueable job goes back to the queue, another
# one ends PREEMPTED).
set -euo pipefail
log() { printf '[slurm-cluster] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ $# -ge 2 ] || die "usage: $0 start|stop|status|env|node-stop|node-start DIR [NODE]"
SCRIPTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cmd="$1"; mkdir -p "$2"; DIR="$(cd "$2" && pwd)"
key="$(printf '%s' "$DIR" | sha256sum | cut -c1-6)"
octet=$(( 16#${key:0:4} % 254 + 1 ))             # 198.18.<octet>.0/24, or 198.19 for odd keys
second=$(( 18 + 16#${key:4:1} % 2 ))
NET="198.$second.$octet"
BR="gsl$key"                                      # bridge (<= 15 chars)
NODES=(n1 n2)
CONF="$DIR/etc/slurm.conf"
SOCK="$DIR/munge/munge.socket"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

install() {
  if [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ] \
     && command -v sbatch >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1; then
    [ -x /usr/sbin/slurmdbd ] && [ -x /usr/sbin/mariadbd ] && return 0
  fi
  log "installing slurm-wlm, slurmdbd, mariadb-server and munge (apt)"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge \
    slurmdbd mariadb-server iproute2 util-linux >/dev/null
}
PATH="/usr/sbin:/sbin:$PATH"

ns() { echo "gsl$key-$1"; }
ip_of() { case "$1" in n1) echo "$NET.11";; n2) echo "$NET.12";; esac; }
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

network_up() {
  ip link show "$BR" >/dev/null 2>&1 || {
    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
  }
  ip link set "$BR" up
  for n in "${NODES[@]}"; do
    local name; name="$(ns "$n")"
    [ -e "/var/run/netns/$name" ] || ip netns add "$name"
    if ! ip link show "v$key$n" >/dev/null 2>&1; then
      ip link add "v$key$n" type veth peer name "p$key$n"
      ip link set "p$key$n" netns "$name"
      ip link set "v$key$n" master "$BR"
      ip -n "$name" addr add "$(ip_of "$n")/24" dev "p$key$n"
    fi
    ip link set "v$key$n" up
    ip -n "$name" link set lo up
    ip -n "$name" link set "p$key$n" up
  done
}

network_down() {
  for n in "${NODES[@]}"; do
    ip link del "v$key$n" 2>/dev/null || true
    ip netns del "$(ns "$n")" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
}

# a writable cgroup v1 memory controller (Slurm 22.05's cgroup/v1 plugin puts the jobs there)
memory_cgroup_v1() {
  local probe="/sys/fs/cgroup/memory/gridml-probe-$key"
  [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] || return 1
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] || return 1  # else Slurm takes it for v2
  mkdir "$probe" 2>/dev/null || return 1
  rmdir "$probe"
}

# Job ids of this cluster start at FirstJobId, one block of 10,000 per DIR: two clusters on this
# machine at once (two pytest workers) share the cgroup tree slurm_<node>/uid_U/job_J, so they must
# not share job ids.
JOB_BLOCK=10000
first_job_id() { echo $(( (16#$key % 6000) * JOB_BLOCK + 1000 )); }

# rmdir what this cluster's jobs left in the cgroup tree (stop kills their slurmstepd)
cgroups_down() {
  local first d id; first="$(first_job_id)"
  for d in /sys/fs/cgroup/memory/slurm_{n1,n2}/uid_*/job_*; do
    [ -d "$d" ] || continue
    id="${d##*job_}"
    [[ "$id" =~ ^[0-9]+$ ]] && [ "$id" -ge "$first" ] && [ "$id" -lt $(( first + JOB_BLOCK )) ] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

# a free port below the ephemeral range: nothing takes it before the daemon binds (gridml/server/ports.py)
free_port() { python3 "$SCRIPTS/../gridml/server/ports.py"; }

write_conf() {
  [ -f "$CONF" ] && return 0
  mkdir -p "$DIR"/{etc,state,spool,log,run,munge,db}
  local port mem cpus dbport dbdport task select
  port="$(free_port)"; dbport="$(free_port)"; dbdport="$(free_port)"
  while [ "$dbport" = "$port" ]; do dbport="$(free_port)"; done
  while [ "$dbdport" = "$port" ] || [ "$dbdport" = "$dbport" ]; do dbdport="$(free_port)"; done
  echo "$dbport" >"$DIR/etc/mariadb.port"
  cpus="$(nproc)"
  mem=$(( $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) / 2 ))
  task="task/none" select="CR_Core"
  if memory_cgroup_v1; then
    task="task/cgroup" select="CR_Core_Memory"  # else Slurm hands the job no memory limit
    {
      echo "# written by scripts/slurm-cluster.sh for $DIR: jobs are held to their --mem"
      echo "CgroupPlugin=cgroup/v1"
      echo "CgroupMountpoint=/sys/fs/cgroup"
      echo "ConstrainCores=no"
      echo "ConstrainDevices=no"
      echo "ConstrainRAMSpace=yes"
      echo "AllowedRAMSpace=100"
      if [ -f /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ]; then
        echo "ConstrainSwapSpace=yes"
        echo "AllowedSwapSpace=0"
      fi
    } >"$DIR/etc/cgroup.conf"
  else
    log "no writable cgroup v1 memory controller at /sys/fs/cgroup/memory: task/none, no memory limit"
  fi
  cat >"$CONF" <<EOF
# written by scripts/slurm-cluster.sh for $DIR
ClusterName=gridml$key
FirstJobId=$(first_job_id)
SlurmctldHost=$(hostname -s)($NET.1)
SlurmctldPort=$port
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=$task
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbdport
AccountingStoragePass=$SOCK
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=$select
DefMemPerCPU=512
SchedulerType=sched/backfill
SlurmdTimeout=10
SlurmctldTimeout=30
MessageTimeout=10
KillWait=5
InactiveLimit=0
MinJobAge=5
ReturnToService=2
OverTimeLimit=0
NodeName=n1 NodeAddr=$NET.11 NodeHostname=$(hostname -s) CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=n2 NodeAddr=$NET.12 NodeHostname=$(hostname -s) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=gridml Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=n1,n2 MaxTime=INFINITE State=UP PriorityTier=10
EOF
  cat >"$DIR/etc/slurmdbd.conf" <<EOF
# written by scripts/slurm-cluster.sh for $DIR
AuthType=auth/munge
AuthInfo=socket=$SOCK
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbdport
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=gridml-test
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf"
}

# MariaDB for slurmdbd: its own data folder, socket and pid in DIR, TCP on 127.0.0.1 only
mariadb_up() {
  pid_alive "$DIR/run/mariadb.pid" && return 0
  local sock="$DIR/run/mariadb.sock" fresh=0
  if [ ! -d "$DIR/db/mysql" ]; then
    mariadb-install-db --no-defaults --user=root --datadir="$DIR/db" --auth-root-authentication-method=socket \
      --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $DIR/log/mariadb-install.log"
    fresh=1
  fi
  mariadbd --no-defaults --user=root --datadir="$DIR/db" --socket="$sock" \
    --pid-file="$DIR/run/mariadb.pid" --bind-address=127.0.0.1 --port="$(cat "$DIR/etc/mariadb.port")" \
    --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=64M --skip-name-resolve \
    --innodb-flush-log-at-trx-commit=2 </dev/null >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    mariadb --no-defaults --socket="$sock" -u root -e 'select 1' >/dev/null 2>&1 && break
    sleep 0.25
  done
  mariadb --no-defaults --socket="$sock" -u root -e 'select 1' >/dev/null 2>&1 \
    || die "MariaDB did not start in 30 s: $DIR/log/mariadb.log"
  if [ "$fresh" = 1 ]; then
    mariadb --no-defaults --socket="$sock" -u root -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY \
      'gridml-test'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  fi
}

slurmdbd_up() {
  if ! pid_alive "$DIR/run/slurmdbd.pid"; then
    SLURM_CONF="$CONF" slurmdbd
  fi
  local ok=0
  for _ in $(seq 1 120); do
    if SLURM_CONF="$CONF" sacctmgr -n list cluster format=cluster >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.25
  done
  [ "$ok" = 1 ] || die "slurmdbd did not answer in 30 s: $DIR/log/slurmdbd.log"
  if ! SLURM_CONF="$CONF" sacctmgr -n -P list cluster format=cluster | grep -qw "gridml$key"; then
    SLURM_CONF="$CONF" sacctmgr -i add cluster "gridml$key" >/dev/null
  fi
}

munge_up() {
  pid_alive "$DIR/run/munged.pid" && return 0
  if [ ! -f "$DIR/munge/munge.key" ]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  fi
  chmod 700 "$DIR/munge"; chmod 400 "$DIR/munge/munge.key"
  munged --force --socket="$SOCK" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
}

slurmd_up() {  # slurmd_up NODE
  local n="$1"
  pid_alive "$DIR/run/slurmd-$n.pid" && return 0
  mkdir -p "$DIR/spool/slurmd-$n"
  # nsenter, not `ip netns exec`: that remounts /sys, and slurmd's start-up trips over it
  SLURM_CONF="$CONF" nsenter --net="/var/run/netns/$(ns "$n")" slurmd -N "$n" -f "$CONF"
}

wait_idle() {
  for _ in $(seq 1 120); do
    if [ "$(SLURM_CONF="$CONF" sinfo -h -N -p gridml -t idle,mix,alloc -o '%N' 2>/dev/null | sort -u | wc -l)" = 2 ]; then
      return 0
    fi
    sleep 0.5
  done
  SLURM_CONF="$CONF" sinfo >&2 || true
  die "the nodes did not come up in 60 s; see $DIR/log/"
}

env_lines() { echo "export SLURM_CONF=$CONF"; echo "export GRIDML_SLURM_PARTITION=gridml"; }

start() {
  install
  write_conf
  network_up
  munge_up
  mariadb_up
  slurmdbd_up
  if ! pid_alive "$DIR/run/slurmctld.pid"; then
    SLURM_CONF="$CONF" slurmctld -f "$CONF"
  fi
  for n in "${NODES[@]}"; do slurmd_up "$n"; done
  for n in "${NODES[@]}"; do  # a node that was down (NODE_FAIL test) is back in service
    SLURM_CONF="$CONF" scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
  done
  wait_idle
  env_lines | tee "$DIR/cluster.env"
}

stop_pids() {  # stop_pids PIDFILE...: SIGTERM to all at once, wait up to 10 s for all, then SIGKILL
  local f pids=()
  for f in "$@"; do
    if pid_alive "$f"; then pids+=("$(cat "$f")"); fi
  done
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "${pids[@]}" 2>/dev/null || break; sleep 0.2; done
    local p
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null; done
  fi
  rm -f "$@"
}

stop() {
  [ -f "$CONF" ] || { network_down; return 0; }
  SLURM_CONF="$CONF" timeout 10 scancel --full --quiet -p gridml 2>/dev/null || true
  local n slurmd=()
  for n in "${NODES[@]}"; do slurmd+=("$DIR/run/slurmd-$n.pid"); done
  stop_pids "${slurmd[@]}"
  # the jobs' own processes (slurmstepd and its children) live in the namespaces: end them
  for n in "${NODES[@]}"; do
    [ -e "/var/run/netns/$(ns "$n")" ] || continue
    for pid in $(ip netns pids "$(ns "$n")" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  done
  cgroups_down
  # together, not one after the other: each takes ~2 s to end on SIGTERM (state saved, tables
  # flushed), ~12 s in turn at the end of every test session that started a cluster
  stop_pids "$DIR/run/slurmctld.pid" "$DIR/run/slurmdbd.pid" "$DIR/run/mariadb.pid" "$DIR/run/munged.pid"
  network_down
  log "stopped ($DIR)"
}

status() {
  local ok=0
  for p in munged mariadb slurmdbd slurmctld slurmd-n1 slurmd-n2; do
    if pid_alive "$DIR/run/$p.pid"; then echo "$p: running ($(cat "$DIR/run/$p.pid"))"
    else echo "$p: stopped"; ok=1; fi
  done
  SLURM_CONF="$CONF" sinfo 2>/dev/null || true
  return $ok
}

# A compute node with no way home, as at an HPC site whose nodes reach the Slurm controller but
# not the login node's services: in each node's namespace every new connection to this machine's
# bridge address is refused as "no route to host", except slurmctld's port (and the replies to
# connections this machine opened: slurmctld -> slurmd). srun run on this machine (slurm.pack's
# steps) needs the nodes to reach it back, as Slurm requires at every site: not with the cut.
cut_home() {
  local ctl; ctl="$(sed -n 's/^SlurmctldPort=//p' "$CONF")"
  [ -n "$ctl" ] || die "no SlurmctldPort in $CONF"
  for n in "${NODES[@]}"; do
    nsenter --net="/var/run/netns/$(ns "$n")" sh -ec "
      iptables -N GRIDML_HOME 2>/dev/null || iptables -F GRIDML_HOME
      iptables -C OUTPUT -d $NET.1 -j GRIDML_HOME 2>/dev/null || iptables -A OUTPUT -d $NET.1 -j GRIDML_HOME
      iptables -A GRIDML_HOME -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
      iptables -A GRIDML_HOME -p tcp --dport $ctl -j ACCEPT
      iptables -A GRIDML_HOME -j REJECT --reject-with icmp-host-unreachable"
  done
  log "nodes cut off from $NET.1 but for slurmctld's port $ctl"
}

mend_home() {
  for n in "${NODES[@]}"; do
    [ -e "/var/run/netns/$(ns "$n")" ] || continue
    nsenter --net="/var/run/netns/$(ns "$n")" sh -c "
      iptables -D OUTPUT -d $NET.1 -j GRIDML_HOME 2>/dev/null
      iptables -F GRIDML_HOME 2>/dev/null; iptables -X GRIDML_HOME 2>/dev/null; true"
  done
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_lines ;;
  node-stop) [ $# -ge 3 ] || die "node-stop DIR NODE"
             pid_alive "$DIR/run/slurmd-$3.pid" && kill -9 "$(cat "$DIR/run/slurmd-$3.pid")"
             rm -f "$DIR/run/slurmd-$3.pid"
             # a lost node takes its processes with it
             for pid in $(ip netns pids "$(ns "$3")" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done ;;
  node-start) [ $# -ge 3 ] || die "node-start DIR NODE"; slurmd_up "$3"
              SLURM_CONF="$CONF" scontrol update nodename="$3" state=resume >/dev/null 2>&1 || true ;;
  node-run) [ $# -ge 4 ] || die "node-run DIR NODE COMMAND..."
            exec nsenter --net="/var/run/netns/$(ns "$3")" "${@:4}" ;;
  cut-home) cut_home ;;
  mend-home) mend_home ;;
  *) die "unknown command $cmd: use start|stop|status|env|node-stop|node-start|node-run|cut-home|mend-home" ;;
esac
