#!/usr/bin/env bash
# Benchmark the accuracy gate against the obvious shell peer.
#
#   vibesys:  vibesys gate baseline --protect data  +  vibesys gate check
#   peer:     find data -type f -print0 | xargs -0 sha256sum > list
#             +  sha256sum -c --quiet list
#
# on a tree of 50,000 files / 2 GiB of deterministic content with varied
# sizes (0 B to 64 MiB). The tree is generated once into a cache directory
# and reused. Both sides run interleaved in the same invocation, each RUNS
# times after one warm-up round; the medians and their ratio are printed.
#
# Caches: dropping the page cache is not reliably possible here, so both
# sides run with a WARM cache (the warm-up round reads the whole tree).
#
# Floor: the hashing the gate cannot avoid, measured here in the same run:
# every byte hashed twice (baseline, check) at BLAKE3's single-thread rate
# on this CPU (`b3sum --num-threads 1`, CPU time on 256 MiB in the page
# cache) spread over every core. Printed when b3sum is installed
# (Debian: b3sum).
#
# Environment:
#   BENCH_FILES (50000)  BENCH_BYTES (2147483648)  BENCH_RUNS (3)
#   BENCH_CACHE (/tmp/vibesys-bench-gate-FILES-BYTES)
#   VIBESYS_BIN (default: build the static binary, scripts/build-static.sh)
set -euo pipefail

FILES=${BENCH_FILES:-50000}
BYTES=${BENCH_BYTES:-2147483648}
RUNS=${BENCH_RUNS:-3}
CACHE=${BENCH_CACHE:-/tmp/vibesys-bench-gate-$FILES-$BYTES}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

need() {
    command -v "$1" >/dev/null 2>&1 || {
        echo "bench-gate: $1 is required: $2" >&2
        exit 1
    }
}
need python3 "install python3"
need sha256sum "install coreutils"
need find "install findutils"
need xargs "install findutils"

# The binary vibesys ships: the static (musl) build (since 2026-12-03; on
# that day's VM 10.8x the peer, the glibc build 12.3x in the same setup).
if [[ -z "${VIBESYS_BIN:-}" ]]; then
    need cargo "install Rust (rustup) or set VIBESYS_BIN"
    TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
    VIBESYS_BIN=$(CARGO_TARGET_DIR=$TARGET "$ROOT/scripts/build-static.sh")
fi
[[ -x "$VIBESYS_BIN" ]] || { echo "bench-gate: $VIBESYS_BIN is not executable" >&2; exit 1; }

TREE=$CACHE/tree
if [[ ! -f "$CACHE/complete" ]]; then
    echo "bench-gate: generating $FILES files / $BYTES bytes into $TREE (once)" >&2
    rm -rf "$CACHE"
    mkdir -p "$CACHE"
    python3 - "$TREE.partial" "$FILES" "$BYTES" <<'PY'
import os, random, sys

out, n, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(20261129)
block = rng.randbytes(8 << 20)  # 8 MiB of seeded noise, sliced per file

# 0.04% of the files are big (16-64 MiB, capped at ~40% of the bytes);
# the rest share what is left with a heavy-tailed spread (many tiny files,
# some exactly 0 bytes).
big = max(1, n // 2500)
big_sizes = [rng.randint(16 << 20, 64 << 20) for _ in range(big)]
scale = min(1.0, 0.4 * total / sum(big_sizes))
big_sizes = [int(s * scale) for s in big_sizes]
rest = total - sum(big_sizes)
weights = [rng.random() ** 3 for _ in range(n - big)]
wsum = sum(weights)
small = [int(w / wsum * rest) for w in weights]
small[-1] += rest - sum(small)
sizes = small + big_sizes
rng.shuffle(sizes)
assert sum(sizes) == total and len(sizes) == n

for i, size in enumerate(sizes):
    d = os.path.join(out, "data", "d%02d" % (i % 50), "e%d" % (i // 50 % 10))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d.bin" % i), "wb") as f:
        off = (i * 104729) % len(block)
        left = size
        while left:
            chunk = block[off:off + min(left, 1 << 20)]
            if not chunk:
                off = 0
                continue
            f.write(chunk)
            left -= len(chunk)
            off = (off + len(chunk)) % len(block)
PY
    mv "$TREE.partial" "$TREE"
    touch "$CACHE/complete"
fi

nfiles=$(find "$TREE/data" -type f | wc -l)
nbytes=$(find "$TREE/data" -type f -printf '%s\n' | awk '{s+=$1} END {printf "%.0f", s}')
"$VIBESYS_BIN" state init --project "$TREE" >/dev/null

run_vibesys() {
    "$VIBESYS_BIN" gate baseline --project "$TREE" --run bench --protect data >/dev/null
    "$VIBESYS_BIN" gate check --project "$TREE" --run bench >/dev/null
}
run_peer() {
    (cd "$TREE" && find data -type f -print0 | xargs -0 sha256sum >"$CACHE/list" &&
        sha256sum -c --quiet "$CACHE/list")
}
measure() { # runs "$@"; prints "wall cpu" seconds (cpu = user + sys of all children)
    local TIMEFORMAT='%R %U %S' t
    if ! t=$( { time "$@" >/dev/null 2>"$CACHE/stderr"; } 2>&1); then
        echo "bench-gate: $* failed:" >&2
        cat "$CACHE/stderr" >&2
        exit 1
    fi
    awk '{ printf "%.3f %.3f", $1, $2 + $3 }' <<<"$t"
}
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }

echo "bench-gate: $nfiles files, $nbytes bytes, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
floor=""
if command -v b3sum >/dev/null 2>&1; then
    head -c $((256 << 20)) /dev/urandom >"$CACHE/floor.bin"
    cat "$CACHE/floor.bin" >/dev/null
    read -r fc <<<"$(measure b3sum --num-threads 1 "$CACHE/floor.bin" | cut -d' ' -f2)"
    rm -f "$CACHE/floor.bin"
    floor=$(awk -v c="$fc" -v b="$nbytes" -v n="$(nproc)" 'BEGIN { r = 268435456 / c; printf "%.3f %.0f", 2 * b / (r * n), r / 1e6 }')
fi
echo "bench-gate: warm cache for both (one warm-up round each); $RUNS runs, interleaved"
measure run_vibesys >/dev/null
measure run_peer >/dev/null
vw=() vc=() pw=() pc=()
for i in $(seq "$RUNS"); do
    read -r w c <<<"$(measure run_vibesys)"
    vw+=("$w") vc+=("$c")
    read -r w c <<<"$(measure run_peer)"
    pw+=("$w") pc+=("$c")
    echo "  run $i: vibesys ${vw[-1]} s wall (${vc[-1]} s cpu), peer ${pw[-1]} s wall (${pc[-1]} s cpu)"
done
vwm=$(median "${vw[@]}") vcm=$(median "${vc[@]}")
pwm=$(median "${pw[@]}") pcm=$(median "${pc[@]}")
echo "median wall: vibesys gate baseline+check ${vwm} s; find|xargs sha256sum + sha256sum -c ${pwm} s"
echo "median cpu:  vibesys ${vcm} s; peer ${pcm} s"
awk -v v="$vwm" -v p="$pwm" -v vc="$vcm" -v pc="$pcm" 'BEGIN {
    printf "ratio: vibesys is %.2fx faster than the peer in wall time (target >= 5x); uses %.2fx less cpu\n", p / v, pc / vc
}'
if [[ -n $floor ]]; then
    read -r fs rate <<<"$floor"
    awk -v v="$vwm" -v f="$fs" -v r="$rate" -v n="$(nproc)" 'BEGIN {
        printf "floor: %.3f s (every byte hashed twice by BLAKE3 at %d MB/s per core x %d cores); vibesys / floor %.2fx\n", f, r, n, v / f
    }'
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
