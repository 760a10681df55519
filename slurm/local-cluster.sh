#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests and CI (Debian's slurm-wlm and munge):
#
#   slurm/local-cluster.sh start DIR   write DIR/slurm.conf, start munged (unless running),
#                                      slurmctld and slurmd; wait until the node is idle
#   slurm/local-cluster.sh stop DIR    stop the daemons that "start DIR" started (by their pids)
#
# Then: SLURM_CONF=DIR/slurm.conf sbatch ...   Needs root (slurmd runs jobs as their users) and
# the packages: apt-get install slurm-wlm munge. The node has this machine's name and CPUs, no GPUs;
# a partition "local" allows several tasks per node, so PARDNN_EMULATE_NODES=1 jobs run 2 "nodes".
set -euo pipefail

usage() {
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
}
[[ $# -eq 2 ]] || usage
action="$1"
dir="$(mkdir -p "$2" && cd "$2" && pwd)"
conf="$dir/slurm.conf"

die() {
    echo "local-cluster.sh: $*" >&2
    exit 1
}

start() {
    [[ $EUID -eq 0 ]] || die "needs root (slurmd must start jobs as their users)"
    for program in munged slurmctld slurmd sinfo; do
        command -v "$program" >/dev/null 2>&1 || die "$program not found: apt-get install slurm-wlm munge"
    done
    local host cpus memory_mib
    host="$(hostname -s)"
    cpus="$(nproc)"
    memory_mib=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 8 / 10240))
    mkdir -p "$dir/ctld" "$dir/slurmd"
    cat >"$conf" <<CONF
ClusterName=pardnn-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=10
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$memory_mib State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    : >"$dir/started"
    if ! munge -n >/dev/null 2>&1; then
        mkdir -p /run/munge
        chown munge:munge /run/munge
        runuser -u munge -- munged
        echo munged >>"$dir/started"
    fi
    slurmctld -f "$conf"
    slurmd -f "$conf"
    echo slurm >>"$dir/started"
    for _ in $(seq 1 60); do
        if SLURM_CONF="$conf" sinfo --noheader --states=idle --format=%n 2>/dev/null | grep -q .; then
            echo "local-cluster.sh: up; export SLURM_CONF=$conf"
            return 0
        fi
        sleep 0.5
    done
    die "the node did not become idle in 30 s; see $dir/slurmctld.log and $dir/slurmd.log"
}

stop_pid_file() {
    local file="$1"
    if [[ -s "$file" ]]; then
        kill "$(cat "$file")" 2>/dev/null || true
    fi
}

stop() {
    [[ -f "$dir/started" ]] || return 0
    if grep -qx slurm "$dir/started"; then
        stop_pid_file "$dir/slurmd.pid"
        stop_pid_file "$dir/slurmctld.pid"
    fi
    if grep -qx munged "$dir/started"; then
        stop_pid_file /run/munge/munged.pid
    fi
    rm -f "$dir/started"
}

case "$action" in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
