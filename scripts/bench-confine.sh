#!/usr/bin/env bash
# Benchmark: confinement start-up cost, ours against the peers, in one run.
#   vibesys exec --confine bwrap -- /bin/true   vs  a lean bwrap line typed by hand
#                                               (and our own plan typed by hand)
#   vibesys exec --confine landlock -- /bin/true vs  plain /bin/true and a lean
#                                               Landlock launcher (and our own
#                                               rules applied by it)
# Prints medians (interleaved rounds) and ratios. Targets: bwrap within
# 1.2x of the lean bwrap line; Landlock within 1 ms of plain exec.
#
# The lean peer (`lean-bwrap`) is what a user would write to confine a
# project by hand: /usr and /etc read-only as whole trees (the merged-usr
# links as links), the same host-secret masks vibesys applies (each
# readable /etc secret of resources.rs's HOST_SECRETS that exists here:
# an empty file or an empty directory over it), the project read-write
# with the same project masks (.git, docs, vibesys.toml read-only; secret
# and token.txt hidden), a private /tmp, fresh /proc and /dev, every
# namespace vibesys unshares by default (user, pid, ipc, uts, cgroup; the
# network is shared in both, as agents reach their model API), a new
# session, --die-with-parent and no capabilities. It has no seccomp
# program, no process limit and no supervisor: that is vibesys's cost.
# `raw-bwrap` is vibesys's own plan typed by hand (the earlier baseline).
# The Landlock peer (`lean-landlock`) is scripts/landlock-lean.c, compiled
# here static-pie (as vibesys ships; dynamic where no libc.a exists):
# what small Landlock launchers do and no more (one ruleset handling
# every file-system right of the kernel's ABI, read and execute on /usr,
# /etc, /opt, /proc and /dev, everything on the project, the temporary
# trees and the writable devices; no_new_privs, a new session, execvp in
# place). It has no supervisor, no process limit, no seccomp program, no
# capability drop and reads no policy; /etc is granted whole (the host
# secrets stay readable to root). `raw-landlock` is the same launcher
# given vibesys's own rules (`policy show --backend landlock --json`):
# what applying our plan costs without the rest of vibesys.
# `guarded-landlock` is the same launcher with --guarded and vibesys's
# rules: the run-time guarantees of vibesys's Landlock launch in their
# leanest form, in C (a pids cgroup of the run where root can make one,
# a subreaper supervisor that kills and reaps what the command leaves, a
# watchdog for the launcher's death, parent-death signal, new session,
# every capability dropped, no_new_privs, Landlock, a seccomp program of
# vibesys's shape): vibesys minus it is what reading the policy, finding
# the host resources and vibesys's own start-up cost. `guarded-bwrap` is
# vibesys's bwrap plan typed by hand (raw-bwrap) under the same launcher
# with READ and WRITE "-": the supervision alone (cgroup, subreaper,
# watchdog, parent-death signal, new session), bwrap doing the rest.
# `plain-true` is the fork+exec floor of the machine.
# Also measured, to show where the time goes: `vibesys --version` (the
# floor of anything vibesys launches: its own start-up) and, when the
# process limit is a cgroup, the same Landlock launch bounded instead by
# RLIMIT_NPROC as an unprivileged user (when run as root, `nobody`).
# The binary measured is the one vibesys ships: the static (musl,
# static-pie) build of scripts/build-static.sh, as the flake's
# `nix run .#vibesys` (pkgsStatic) builds it. A glibc build pays the
# dynamic loader on every launch (0.46 ms of a Landlock launch here,
# 2026-12-03, interleaved): pass
# BASELINE=target/release/vibesys to see it in the same run.
# `static-hello` is a static Rust "hello" built here with the same target:
# what any launcher written in Rust costs to start, against which
# `vibesys --version` shows the cost of vibesys's own size.
# VIBESYS=/path/to/vibesys measures that binary instead of building one.
# BASELINE=/path/to/vibesys adds that binary's bwrap and Landlock launches
# and its `--version` (e.g. the build before a change) to the same run: the
# launch cost before and after. Several binaries, separated by spaces, are
# each added under their file name (BASELINE="/x/same /x/no-relr": rows
# same-bwrap, no-relr-bwrap, ...; a copy of the measured binary under
# another name gives the noise of an A/A comparison in the same run).
# Both are copied into a scratch directory first and run from there: a
# binary fresh from the linker in target/ started ~0.3 ms slower than a cp
# of the same file (measured 2026-12-02), which would skew an A/B.
# The commands run interleaved (scripts/interleave.c, compiled here): each
# round runs every command once, in a fresh random order, so all of them
# see the same load; run one after the other (as hyperfine does), the load
# drifted between commands and moved a ratio by 20% on a shared VM.
# Usage: scripts/bench-confine.sh [ROUNDS]   (needs bwrap, cc, python3)
set -euo pipefail
runs=${1:-300}
root=$(cd "$(dirname "$0")/.." && pwd)
for t in bwrap cc python3; do
  command -v "$t" >/dev/null || { echo "bench-confine: needs $t (apt-get install ${t/cc/gcc})" >&2; exit 1; }
done
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
if [ -n "${VIBESYS:-}" ]; then
  built=$VIBESYS   # an already built binary (e.g. a debug build while iterating)
else
  built=$(CARGO_TARGET_DIR=$target_dir "$root/scripts/build-static.sh")
fi

interleave="$target_dir/interleave"
cc -O2 -o "$interleave" "$root/scripts/interleave.c"
landlock_lean="$target_dir/landlock-lean"
# Static-pie, as vibesys ships (no dynamic loader on each launch, and
# ASLR kept): the leanest build of the peer. A C library without a static
# archive (no libc.a) falls back to a dynamic build, said here.
landlock_link=static-pie
if ! cc -O2 -fPIE -static-pie -o "$landlock_lean" "$root/scripts/landlock-lean.c" 2>/dev/null; then
  landlock_link=dynamic
  echo "bench-confine: no static C library here: the C launchers are dynamic (they pay the loader)" >&2
  cc -O2 -o "$landlock_lean" "$root/scripts/landlock-lean.c"
fi

# Scratch space outside /tmp (Landlock refuses projects below /tmp): the
# binaries as copies, and a sample project.
scratch=$(mktemp -d "$target_dir/bench-confine.XXXXXX")
case "$scratch" in *" "*) echo "bench-confine: the command lines are split on spaces; use a target directory without spaces" >&2; exit 1 ;; esac
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin" "$scratch/project"
chmod 755 "$scratch" "$scratch/bin"   # the unprivileged round runs the copy too
cp "$built" "$scratch/bin/vibesys"
vibesys=$scratch/bin/vibesys
# BASELINE: one path is named `baseline` (as before); several, by their file names.
baselines=()
if [ -n "${BASELINE:-}" ]; then
  read -r -a bpaths <<<"$BASELINE"
  for b in "${bpaths[@]}"; do
    name=baseline
    [ "${#bpaths[@]}" -gt 1 ] && name=$(basename "$b")
    case "$name" in vibesys | static-hello | *[!A-Za-z0-9_.-]*)
      echo "bench-confine: baseline $b: its file name must differ from vibesys and static-hello and be [A-Za-z0-9_.-]" >&2; exit 1 ;;
    esac
    [ -e "$scratch/bin/$name" ] && { echo "bench-confine: two baselines named $name" >&2; exit 1; }
    cp "$b" "$scratch/bin/$name"
    baselines+=("$name")
  done
fi
static_hello=
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  printf 'fn main() {\n    println!("hello");\n}\n' > "$scratch/hello.rs"
  rustc -O --target x86_64-unknown-linux-musl -o "$scratch/bin/static-hello" "$scratch/hello.rs" && static_hello=$scratch/bin/static-hello
fi
proj=$scratch/project
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

# The lean hand-written peer (see the header).
lean=(bwrap --unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try
  --die-with-parent --new-session --cap-drop ALL --ro-bind /usr /usr)
for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
  if [ -L "$d" ]; then lean+=(--symlink "$(readlink "$d")" "$d")
  elif [ -d "$d" ]; then lean+=(--ro-bind "$d" "$d"); fi
done
lean+=(--ro-bind /etc /etc)
secrets=(/etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow- /etc/sudoers /etc/sudoers.d
  /etc/ssl/private /etc/ssh/ssh_host_* /etc/security/opasswd /etc/krb5.keytab
  /etc/NetworkManager/system-connections /etc/ppp/chap-secrets /etc/ppp/pap-secrets
  /etc/docker/key.json /etc/munge/munge.key /etc/slurm/slurmdbd.conf /etc/credstore
  /etc/credstore.encrypted /etc/wireguard /etc/ipsec.secrets /etc/ipsec.d/private
  /etc/letsencrypt/archive /etc/letsencrypt/keys /etc/pki/tls/private
  /etc/mysql/debian.cnf /etc/postfix/sasl_passwd)
# Masked where the sandbox could read them: by mode bits, without
# capabilities (as vibesys decides; root's override does not survive
# --cap-drop ALL, so a secret below a 0700 directory needs no mask).
nocaps=()
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && nocaps=(setpriv --bounding-set=-all --inh-caps=-all --)
readable=$("${nocaps[@]}" sh -c 'for s; do [ -e "$s" ] && [ ! -L "$s" ] && [ -r "$s" ] && echo "$s"; done; true' sh "${secrets[@]}")
while IFS= read -r s; do
  [ -n "$s" ] || continue
  if [ -d "$s" ]; then lean+=(--tmpfs "$s" --remount-ro "$s"); else lean+=(--ro-bind /dev/null "$s"); fi
done <<<"$readable"
lean+=(--tmpfs /tmp --proc /proc --dev /dev --bind "$proj" "$proj"
  --ro-bind "$proj/.git" "$proj/.git" --ro-bind "$proj/docs" "$proj/docs"
  --ro-bind "$proj/vibesys.toml" "$proj/vibesys.toml"
  --tmpfs "$proj/secret" --remount-ro "$proj/secret" --ro-bind /dev/null "$proj/token.txt"
  --chdir "$proj" -- /bin/true)
lean_line=$(printf '%q ' "${lean[@]}")

# The Landlock peers (see the header): colon-separated rule lists.
devices=/dev/null:/dev/zero:/dev/full:/dev/random:/dev/urandom:/dev/tty:/dev/ptmx:/dev/pts
lean_landlock="$landlock_lean /usr:/etc:/opt:/proc:/dev $proj:/tmp:/dev/shm:/var/tmp:$devices /bin/true"
rules=$("$vibesys" policy show --backend landlock --json 2>/dev/null | python3 -c '
import json, sys
plan = json.load(sys.stdin)["backends"]["landlock"]["plan"]
for key in ("read", "write"):
    if any(":" in p or " " in p for p in plan[key]):
        sys.exit("bench-confine: a Landlock rule path holds a colon or a space: " + repr(plan[key]))
print(":".join(plan["read"]), ":".join(plan["write"]))')
raw_landlock="$landlock_lean $rules /bin/true"
# The guarded launcher's pids cgroup: the parent vibesys itself chose
# (`doctor`'s processes check); "-" (none) where vibesys uses no cgroup.
cg_parent=$("$vibesys" doctor --json 2>/dev/null | python3 -c '
import json, re, sys
checks = json.load(sys.stdin)["checks"]
detail = next((c["detail"] for c in checks if c["name"] == "processes"), "")
m = re.search(r"a pids cgroup v[12] per run below (\S+?)/?;", detail)
print(m.group(1) if m else "-")') || cg_parent=-
# doctor's wording is prose: say what was read, so that a changed wording
# (read as "no cgroup") cannot pass unnoticed as a cheaper peer.
echo "bench-confine: the guarded launcher's pids cgroup parent, from vibesys doctor: $cg_parent" >&2
if [ "$cg_parent" = - ] && [ "$(id -u)" = 0 ]; then
  echo "bench-confine: warning: as root vibesys usually bounds processes with a pids cgroup; doctor's processes check named none" >&2
fi
guarded_landlock="$landlock_lean --guarded $cg_parent $rules /bin/true"

cmds=(lean-bwrap "$lean_line" raw-bwrap "$raw"
  vibesys-bwrap "$vibesys exec --confine bwrap -- /bin/true"
  plain-true "/bin/true"
  vibesys-version "$vibesys --version"
  vibesys-landlock "$vibesys exec --confine landlock -- /bin/true"
  lean-landlock "$lean_landlock" raw-landlock "$raw_landlock"
  guarded-landlock "$guarded_landlock"
  guarded-bwrap "$landlock_lean --guarded $cg_parent - - $raw")
for name in "${baselines[@]}"; do
  cmds+=("$name-bwrap" "$scratch/bin/$name exec --confine bwrap -- /bin/true")
  cmds+=("$name-landlock" "$scratch/bin/$name exec --confine landlock -- /bin/true")
  cmds+=("$name-version" "$scratch/bin/$name --version")
done
[ -n "$static_hello" ] && cmds+=(static-hello "$static_hello")
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  # The same launch as an unprivileged user (its own project copy).
  uproj=$(mktemp -d "$target_dir/bench-confine-user.XXXXXX")
  trap 'rm -rf "$scratch" "$uproj"' EXIT
  cp -a "$proj/." "$uproj/"
  chown -R nobody "$uproj"
  chmod 755 "$uproj"
  cmds+=(setpriv-true "$(command -v setpriv) --reuid=nobody --regid=nogroup --clear-groups -- /bin/true")
  cmds+=(setpriv-landlock "$(command -v setpriv) --reuid=nobody --regid=nogroup --clear-groups -- $vibesys exec --project $uproj --confine landlock -- /bin/true")
fi
echo "bench-confine: $runs interleaved rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "bench-confine: the C launchers (lean-, raw-, guarded-) are built $landlock_link" >&2
results=$("$interleave" "$runs" 20 "${cmds[@]}")
python3 - "$results" "${baselines[@]}" <<'PY'
import sys
rows = [l.split("\t") for l in sys.argv[1].splitlines()]
baselines = sys.argv[2:]
med = {r[0]: float(r[1]) for r in rows}
print(f"{'command':<18} {'median':>8} {'p10':>8} {'p90':>8} {'min':>8}  (ms)")
for r in rows:
    print(f"{r[0]:<18} {float(r[1]):>8.3f} {float(r[2]):>8.3f} {float(r[3]):>8.3f} {float(r[4]):>8.3f}")
b = med["vibesys-bwrap"] / med["lean-bwrap"]
d = med["vibesys-landlock"] - med["plain-true"]
print(f"floor: fork+exec of /bin/true = {med['plain-true']:.3f} ms; vibesys's own start-up (--version) = {med['vibesys-version']:.3f} ms")
if "static-hello" in med:
    print(f"floor: a static Rust hello = {med['static-hello']:.3f} ms; vibesys --version - static hello = {med['vibesys-version'] - med['static-hello']:.3f} ms (vibesys's size: relocations, page faults)")
print(f"bwrap: vibesys / lean hand-written bwrap = {b:.3f}x (target <= 1.2x)")
print(f"bwrap: vibesys's plan and supervision in C (guarded launcher) / lean line = {med['guarded-bwrap'] / med['lean-bwrap']:.3f}x; vibesys / guarded = {med['vibesys-bwrap'] / med['guarded-bwrap']:.3f}x")
print(f"bwrap: vibesys / its own plan typed by hand = {med['vibesys-bwrap'] / med['raw-bwrap']:.3f}x; the plan typed by hand / the lean line = {med['raw-bwrap'] / med['lean-bwrap']:.3f}x")
print(f"landlock: vibesys - plain exec = {d:.3f} ms (ratio {med['vibesys-landlock']/med['plain-true']:.2f}x; target <= 1 ms)")
print(f"landlock: vibesys - vibesys --version (its own start-up) = {med['vibesys-landlock'] - med['vibesys-version']:.3f} ms")
print(f"landlock: lean hand-written launcher - plain exec = {med['lean-landlock'] - med['plain-true']:.3f} ms; with vibesys's rules = {med['raw-landlock'] - med['plain-true']:.3f} ms")
print(f"landlock: vibesys / lean hand-written launcher = {med['vibesys-landlock'] / med['lean-landlock']:.3f}x (vibesys - lean = {med['vibesys-landlock'] - med['lean-landlock']:.3f} ms)")
print(f"landlock: vibesys's guarantees in C (guarded launcher) - plain exec = {med['guarded-landlock'] - med['plain-true']:.3f} ms; vibesys - guarded = {med['vibesys-landlock'] - med['guarded-landlock']:.3f} ms (policy, host resources, vibesys's own start-up)")
for b in baselines:
    for what in ("bwrap", "landlock", "version"):
        ours, theirs = med[f"vibesys-{what}"], med[f"{b}-{what}"]
        print(f"{what}: vibesys / {b} = {ours / theirs:.3f}x ({ours - theirs:+.3f} ms)")
if "setpriv-landlock" in med:
    print(f"landlock as an unprivileged user: vibesys - plain exec = {med['setpriv-landlock'] - med['setpriv-true']:.3f} ms (ratio {med['setpriv-landlock'] / med['setpriv-true']:.2f}x)")
PY
