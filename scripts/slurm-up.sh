#!/usr/bin/env bash
# Starts a single-node Slurm cluster on this machine for the slurm run
# environment's tests and benchmark: munged, slurmctld and slurmd from
# Debian's slurm-wlm + munge (scripts/install-deps.sh installs them), one
# node named after this host, two GPUs declared as GRES over device files
# (so --gres=gpu:N schedules and sets CUDA_VISIBLE_DEVICES without a
# physical GPU). Idempotent: a running cluster is left as it is. Needs root.
# Stop it with scripts/slurm-down.sh.
#
# Everything it writes is marked or lives below its own directories:
#   /etc/slurm/slurm.conf, /etc/slurm/gres.conf   (first line: "# vibesys")
#   /run/vibesys-slurm       pid files, the fake GPU device nodes
#   /var/lib/vibesys-slurm   slurmctld state, slurmd spool
#   /var/log/vibesys-slurm   daemon logs
# An /etc/slurm/slurm.conf that vibesys did not write is never replaced.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "slurm-up: needs root (it starts munged, slurmctld and slurmd)" >&2
  exit 1
fi
for tool in munged slurmctld slurmd sinfo srun; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "slurm-up: $tool is missing; install slurm-wlm and munge (scripts/install-deps.sh)" >&2
    exit 1
  fi
done

run=/run/vibesys-slurm
lib=/var/lib/vibesys-slurm
log=/var/log/vibesys-slurm
conf=/etc/slurm/slurm.conf
node=$(hostname -s)
mkdir -p "$run" "$lib/ctld" "$lib/d" "$log" /etc/slurm

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Fake GPUs: character devices with /dev/null's numbers, so opening one is
# harmless; the job's sandbox binds only the ones Slurm allocated.
for i in 0 1; do
  [ -c "$run/gpu$i" ] || mknod -m 0666 "$run/gpu$i" c 1 3
done

if [ -f "$conf" ] && ! head -n1 "$conf" | grep -q '^# vibesys'; then
  echo "slurm-up: $conf exists and was not written by vibesys; not touching it" >&2
  exit 1
fi
cat >"$conf.tmp" <<EOF
# vibesys scripts/slurm-up.sh: single-node test cluster (remove with slurm-down.sh)
ClusterName=vibesys
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$lib/ctld
SlurmdSpoolDir=$lib/d
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$log/slurmctld.log
SlurmdLogFile=$log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
MinJobAge=300
KillWait=2
InactiveLimit=0
MessageTimeout=10
SlurmdTimeout=30
NodeName=$node NodeAddr=127.0.0.1 CPUs=16 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
mv "$conf.tmp" "$conf"
cat >/etc/slurm/gres.conf.tmp <<EOF
# vibesys scripts/slurm-up.sh: two fake GPUs over device files
NodeName=$node Name=gpu File=$run/gpu[0-1]
EOF
mv /etc/slurm/gres.conf.tmp /etc/slurm/gres.conf

if ! alive "$run/munged.pid"; then
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  cp /run/munge/munged.pid "$run/munged.pid"
fi
if ! alive "$run/slurmctld.pid"; then
  slurmctld -i
fi
if ! alive "$run/slurmd.pid"; then
  slurmd -N "$node"
fi

# Ready when the node is idle (or mixed/allocated by jobs already running).
for _ in $(seq 1 100); do
  state=$(sinfo -h -n "$node" -o %t 2>/dev/null || true)
  case "$state" in
  idle* | mix* | alloc* | comp* | plnd*)
    echo "slurm-up: node $node is $state"
    exit 0
    ;;
  down* | drain*)
    scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    ;;
  esac
  sleep 0.2
done
echo "slurm-up: node $node did not become idle (state: ${state:-no answer}); see $log" >&2
exit 1
