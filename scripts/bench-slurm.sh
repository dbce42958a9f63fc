#!/usr/bin/env bash
# Benchmark the Slurm host command broker against `srun` typed by hand, in
# one run, on the single-node cluster of scripts/slurm-up.sh (started here
# when it is not up; needs root, slurm-wlm, munge, bwrap, python3).
#
#   gate:   vibesys broker gate --socket FRAMEWORK true-gate
#   peer:   srun --nodes=1 --ntasks=1 --time=5 true           (same job, by hand)
#   job:    vibesys broker job --socket AGENT -- true          (confined: bwrap on the node)
#   peer:   the very srun the broker runs for it, typed by hand
#           (srun ... vibesys internal-host-job ... -- true)
#   info:   srun ... bwrap ... true: a plain bwrap sandbox by hand (weaker:
#           no seccomp, fewer namespaces), to show what confinement costs
#   floor:  srun --nodes=1 --ntasks=1 --time=5 true
#
# Prints medians and the ratios broker/peer (target: within 1.2x).
# Usage: scripts/bench-slurm.sh [RUNS]   (VIBESYS_BIN: default release build)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-30}
for t in srun python3 bwrap; do
  command -v "$t" >/dev/null || { echo "bench-slurm: $t missing (scripts/install-deps.sh)" >&2; exit 1; }
done
"$ROOT/scripts/slurm-up.sh" >/dev/null
if [[ -z "${VIBESYS_BIN:-}" ]]; then
  (cd "$ROOT" && cargo build --release -q -p vibesys)
  VIBESYS_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/vibesys
fi

work=$(mktemp -d /tmp/vibesys-bench-slurm.XXXXXX)
broker=
cleanup() {
  [[ -n "$broker" ]] && kill -TERM "$broker" 2>/dev/null && wait "$broker" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/project"
cat >"$work/project/vibesys.toml" <<'EOF'
[vibesys.agent_gpu]
enabled = true
max_time_minutes = 5

[gates.true-gate]
argv = ["true"]
EOF
run=bench-$$
"$VIBESYS_BIN" broker serve --project "$work/project" --run "$run" >"$work/sockets" 2>"$work/broker.log" &
broker=$!
for _ in $(seq 1 300); do
  grep -q '^framework: ' "$work/sockets" 2>/dev/null && break
  kill -0 "$broker" 2>/dev/null || { cat "$work/broker.log" >&2; exit 1; }
  sleep 0.1
done
agent=$(sed -n 's/^agent: //p' "$work/sockets")
framework=$(sed -n 's/^framework: //p' "$work/sockets")
# A plain bwrap sandbox typed by hand (read-only system, private /tmp and
# /proc, workspace bound read-write; no seccomp, fewer namespaces).
bw="bwrap --unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try --die-with-parent --new-session --disable-userns --cap-drop ALL --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp --bind $work/project $work/project --chdir $work/project"
srun_args="--quiet --nodes=1 --ntasks=1 --time=5"

cd "$work/project"
# The commands run interleaved (one round runs each once, in turn), so a
# change in the machine's load hits every side alike; medians per side.
python3 - "$runs" \
  "broker-gate" "$VIBESYS_BIN broker gate --socket $framework true-gate" \
  "srun-true" "srun $srun_args true" \
  "broker-job" "$VIBESYS_BIN broker job --socket $agent -- true" \
  "srun-helper-true" "srun $srun_args $VIBESYS_BIN internal-host-job --project $work/project --workspace $work/project --cwd $work/project --gpu-devices /dev/nvidia{} -- true" \
  "srun-bwrap-true" "srun $srun_args $bw true" <<'PY'
import shlex, statistics, subprocess, sys, time
runs = int(sys.argv[1])
cmds = [(sys.argv[i], shlex.split(sys.argv[i + 1])) for i in range(2, len(sys.argv), 2)]
times = {name: [] for name, _ in cmds}
for round_ in range(runs + 3):
    for name, argv in cmds:
        t = time.perf_counter()
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dt = (time.perf_counter() - t) * 1000
        if p.returncode != 0:
            sys.exit(f"bench-slurm: {name} exited {p.returncode}")
        if round_ >= 3:  # three warm-up rounds
            times[name].append(dt)
r = {k: statistics.median(v) for k, v in times.items()}
print(f"{'command':<18} {'median ms':>10}   ({runs} interleaved runs each)")
for k, v in r.items():
    print(f"{k:<18} {v:>10.1f}")
g = r["broker-gate"] / r["srun-true"]
j = r["broker-job"] / r["srun-helper-true"]
b = r["broker-job"] / r["srun-bwrap-true"]
print(f"gate through the broker / the same srun by hand:         {g:.2f}x (target <= 1.2x)")
print(f"confined job through the broker / the same srun by hand: {j:.2f}x (target <= 1.2x)")
print(f"confined job through the broker / srun of a plain bwrap: {b:.2f}x (information: the HostSandbox plan's own cost)")
print(f"floor (srun true): {r['srun-true']:.1f} ms")
PY
