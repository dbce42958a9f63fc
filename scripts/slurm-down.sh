#!/usr/bin/env bash
# Stops the single-node Slurm cluster started by scripts/slurm-up.sh:
# cancels every job, stops slurmd, slurmctld and munged (only the ones it
# started, by their pid files) and removes the configuration it wrote.
# Idempotent: with nothing running it does nothing and succeeds.
set -euo pipefail

run=/run/vibesys-slurm
conf=/etc/slurm/slurm.conf

stop() {
  local pidfile=$1
  [ -f "$pidfile" ] || return 0
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

ours=false
if [ -f "$conf" ] && head -n1 "$conf" | grep -q '^# vibesys'; then
  ours=true
fi
if $ours && [ -f "$run/slurmctld.pid" ]; then
  squeue -h -o %i 2>/dev/null | xargs -r scancel >/dev/null 2>&1 || true
fi
stop "$run/slurmd.pid"
stop "$run/slurmctld.pid"
stop "$run/munged.pid"
if $ours; then
  rm -f "$conf" /etc/slurm/gres.conf
fi
rm -f "$run/gpu0" "$run/gpu1"
rm -rf /var/lib/vibesys-slurm
echo "slurm-down: stopped"
