#!/usr/bin/env bash
# Benchmark: confinement start-up cost, ours against the peer, in one run.
#   vibesys exec --confine bwrap -- /bin/true   vs  the same bwrap command line by hand
#   vibesys exec --confine landlock -- /bin/true vs  plain /bin/true
# Prints medians (hyperfine, many runs) and ratios. Targets: bwrap within
# 1.2x of raw bwrap; Landlock within 2 ms of plain exec.
# Also measured, to show where the time goes: `vibesys --version` (the
# floor of anything vibesys launches: its own start-up) and, when the
# process limit is a cgroup, the same Landlock launch bounded instead by
# RLIMIT_NPROC as an unprivileged user (when run as root, `nobody`).
# BASELINE=/path/to/vibesys adds that binary's bwrap and Landlock launches
# (e.g. the build before a change) to the same run: the launch cost before
# and after.
# Usage: scripts/bench-confine.sh [RUNS]   (needs bwrap, hyperfine, python3)
set -euo pipefail
runs=${1:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
for t in bwrap hyperfine python3; do
  command -v "$t" >/dev/null || { echo "bench-confine: needs $t (apt-get install ${t/python3/python3})" >&2; exit 1; }
done
cargo build --release -q -p vibesys --manifest-path "$root/Cargo.toml"
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
vibesys="$target_dir/release/vibesys"

# A sample project outside /tmp (Landlock refuses projects below /tmp).
proj=$(mktemp -d "$target_dir/bench-confine.XXXXXX")
trap 'rm -rf "$proj"' EXIT
mkdir -p "$proj/docs" "$proj/secret" "$proj/.git"
echo t > "$proj/token.txt"
printf '[sandbox]\nread_only = ["docs"]\nhidden = ["secret", "token.txt"]\n' > "$proj/vibesys.toml"
cd "$proj"

# The hand-written equivalent: the exact plan vibesys applies, with the
# descriptors it creates replaced by what a shell script can do (no seccomp
# program; /dev/null for the empty mask file; path binds for the descriptor
# binds, which a script cannot open race-free).
raw=$("$vibesys" policy show --backend bwrap --json | python3 -c '
import json, shlex, sys
plan = json.load(sys.stdin)["backends"]["bwrap"]["plan"]
args, out, i = plan["args"], [plan["program"]], 0
while i < len(args):
    a = args[i]
    if a == "--seccomp": i += 2; continue
    if a == "--perms": i += 2; continue
    if a == "--ro-bind-data": out += ["--ro-bind", "/dev/null", args[i + 2]]; i += 3; continue
    # Descriptor binds (what vibesys opens and checks) become path binds.
    if a in ("--bind-fd", "--ro-bind-fd"): out += [a[:-3], args[i + 2], args[i + 2]]; i += 3; continue
    out.append(a); i += 1
print(shlex.join(out + ["--", "/bin/true"]))')

json=$(mktemp)
extra=()
if [ -n "${BASELINE:-}" ]; then
  extra+=(-n baseline-bwrap "$BASELINE exec --confine bwrap -- /bin/true")
  extra+=(-n baseline-landlock "$BASELINE exec --confine landlock -- /bin/true")
fi
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  # The same launch as an unprivileged user (its own project copy).
  uproj=$(mktemp -d "$target_dir/bench-confine-user.XXXXXX")
  trap 'rm -rf "$proj" "$uproj"' EXIT
  cp -a "$proj/." "$uproj/"
  chown -R nobody "$uproj"
  chmod 755 "$uproj"
  extra+=(-n setpriv-true "setpriv --reuid=nobody --regid=nogroup --clear-groups -- /bin/true")
  extra+=(-n setpriv-landlock "setpriv --reuid=nobody --regid=nogroup --clear-groups -- $vibesys exec --project $uproj --confine landlock -- /bin/true")
fi
hyperfine -N --warmup 20 --runs "$runs" --export-json "$json" \
  -n raw-bwrap "$raw" \
  -n vibesys-bwrap "$vibesys exec --confine bwrap -- /bin/true" \
  -n plain-true "/bin/true" \
  -n vibesys-version "$vibesys --version" \
  -n vibesys-landlock "$vibesys exec --confine landlock -- /bin/true" \
  "${extra[@]}" >/dev/null
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
med = {k: v["median"] * 1000 for k, v in r.items()}
print(f"{'command':<18} {'median ms':>10}")
for k, v in med.items():
    print(f"{k:<18} {v:>10.3f}")
b = med["vibesys-bwrap"] / med["raw-bwrap"]
d = med["vibesys-landlock"] - med["plain-true"]
print(f"bwrap: vibesys / raw bwrap = {b:.3f}x (target <= 1.2x)")
print(f"landlock: vibesys - plain exec = {d:.3f} ms (ratio {med['vibesys-landlock']/med['plain-true']:.2f}x; target <= 2 ms)")
print(f"landlock: vibesys - vibesys --version (its own start-up) = {med['vibesys-landlock'] - med['vibesys-version']:.3f} ms")
if "baseline-bwrap" in med:
    print(f"bwrap: vibesys / baseline = {med['vibesys-bwrap'] / med['baseline-bwrap']:.3f}x")
if "baseline-landlock" in med:
    print(f"landlock: vibesys / baseline = {med['vibesys-landlock'] / med['baseline-landlock']:.3f}x")
if "setpriv-landlock" in med:
    print(f"landlock as an unprivileged user: vibesys - plain exec = {med['setpriv-landlock'] - med['setpriv-true']:.3f} ms (ratio {med['setpriv-landlock'] / med['setpriv-true']:.2f}x)")
PY
rm -f "$json"
