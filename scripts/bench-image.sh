#!/usr/bin/env bash
# Benchmark: build the same content (>= 500 MiB in ~44k files: part of the
# Rust toolchain) into a docker-loadable image with vibesys and with the
# peers available here, cold and after changing one file; print medians,
# ratios and peak memory.
#
#   scripts/bench-image.sh            # RUNS=3 by default
#   RUNS=5 DOCKER_RUNS=3 BENCH_DIR=/var/tmp/b scripts/bench-image.sh
#   CLOSURE=0 scripts/bench-image.sh  # without the Nix closure case
#   PEERS=0 scripts/bench-image.sh    # without umoci + skopeo and docker build
#   BASELINE="/x/same /x/no-edit" scripts/bench-image.sh
#       # the archive cases (cold, one file changed, grown) also by each of
#       # these binaries, named by their file names, in the same rounds (the
#       # order of the binaries shuffled per round); a copy of the measured
#       # binary under another name gives the noise of an A/A comparison
#
# Peers:
#   umoci:  umoci init + new + insert (gzip layer, umoci's only choice) and
#           skopeo copy to a docker-archive.
#   docker: `docker build` of a FROM scratch image with COPY of the same tree
#           (classic builder; the result is an image in the daemon, not a file).
# vibesys: `vibesys image build --root` to the default hybrid archive, layers
#           uncompressed (the default for local loading), with a layer cache.
#
# closure: the same content added to /nix/store as ~45 store paths (each
#           ~12 MiB of whole files or small directories, plus a root path
#           referencing them all), given to
#           `vibesys image build --references-graph`, to the OCI directory
#           and to the archive. "One file changed" is what Nix does: the
#           store path holding the file is replaced by a new store path with
#           the changed file (and a new root), and the graph is updated.
#           No peer builds from a references graph here (nix2container and
#           dockerTools need nixpkgs, which cannot be fetched).
#
# floor:   what a cold build cannot beat on this machine, measured here in
#          the same run: hashing the archive's bytes once with the fastest
#          SHA-256 of this CPU (`sha256sum` or `openssl dgst -sha256`, on a
#          page-cached file, by CPU time) on every core, and writing them once at the
#          disk's rate (`dd ... conv=fdatasync`); the floor is the larger.
#          The build hashes layers on every core and does not sync, so it
#          can come in under the floor when the page cache absorbs writes.
#
# "cold": empty layer cache / fresh layout / `docker build --no-cache`;
# the inputs are read once, untimed, before every cold case of every tool:
# the floor does not count reading them from disk, and the kernel's
# proactive reclaim (kdamond, on these machines) evicts them between cases
# (a cold build took 0.67 to 4.1 s by that alone, 2026-12-03).
# "one file changed": one file of the tree rewritten, then rebuilt with
# whatever reuse the tool offers (vibesys: layer cache, and the archive
# edited in place; umoci: appends a new layer holding the whole tree again;
# docker: build cache, COPY re-runs).
# "one file grown": vibesys only, a file early in the archive grown by
# 256 KiB, so that its layer takes more pages and everything after it
# moves (the edit writes the rest of the archive over): right after the
# previous build (its pages still dirty in the page cache) and after
# `sync` (as after the kernel's writeback, ~30 s later).
#
# Needs: a static vibesys (built if missing: scripts/build-static.sh), umoci, skopeo, docker,
# /usr/bin/time (Debian: time), rustc (for the content); for the closure
# case nix-store and nix-instantiate (Debian: nix-bin) with a writable
# /nix/store (root). Store paths it adds are deleted at the end.
set -euo pipefail

RUNS=${RUNS:-3}
# docker build is an order of magnitude slower: fewer runs keep the script near 10 minutes.
DOCKER_RUNS=${DOCKER_RUNS:-2}
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
# The binary measured is the one vibesys ships: the static (musl) build of
# scripts/build-static.sh, as the flake's `nix run .#vibesys` builds it
# (since 2026-12-03; before, the glibc build of `cargo build --release`,
# which a rebuild of one file still beats by ~1.15x: docs/sandboxing.md,
# "The allocator of the static build"). VIBESYS=/path/to/vibesys measures
# that binary instead.
VIBESYS=${VIBESYS:-}
if [[ -z $VIBESYS ]]; then
    VIBESYS=$(CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT_DIR/target} "$ROOT_DIR/scripts/build-static.sh")
fi
CLOSURE=${CLOSURE:-1}
PEERS=${PEERS:-1}
read -r -a BASELINES <<<"${BASELINE:-}"
for b in "${BASELINES[@]}"; do
    [[ -x $b ]] || { echo "bench-image: baseline $b is not an executable" >&2; exit 1; }
    case "$(basename "$b")" in vibesys | cp-archive | *[!A-Za-z0-9_-]*)
        echo "bench-image: baseline $b: its file name must not be vibesys and be [A-Za-z0-9_-]" >&2; exit 1 ;;
    esac
done
tools=(/usr/bin/time rustc)
[[ $PEERS == 0 ]] || tools+=(umoci skopeo docker)
[[ $CLOSURE == 0 ]] || tools+=(nix-store nix-instantiate)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || { echo "bench-image: $tool not found: install it (or CLOSURE=0 without Nix)" >&2; exit 1; }
done

WORK=${BENCH_DIR:-$(mktemp -d /var/tmp/vibesys-bench.XXXXXX)}
mkdir -p "$WORK"
TAG=vibesys-bench-$$
STORE_ADDED=()   # store paths this run added, newest last
cleanup() {
    docker rmi -f "$TAG:cold" "$TAG:inc" >/dev/null 2>&1 || true
    # Roots reference the other paths: delete newest first.
    local i
    for ((i = ${#STORE_ADDED[@]} - 1; i >= 0; i--)); do
        nix-store --delete "${STORE_ADDED[i]}" >/dev/null 2>&1 || true
    done
    [[ -n ${BENCH_DIR:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT

# --- content -----------------------------------------------------------------
SYSROOT=$(rustc --print sysroot)
CTX=$WORK/ctx
if [[ ! -d $CTX/root/opt/rust ]]; then
    mkdir -p "$CTX/root/opt/rust/lib" "$CTX/root/opt/rust/doc"
    cp -a "$SYSROOT/lib/rustlib/x86_64-unknown-linux-gnu" "$CTX/root/opt/rust/lib/"
    cp -a "$SYSROOT/share/doc/rust/html/core" "$SYSROOT/share/doc/rust/html/std" "$CTX/root/opt/rust/doc/"
fi
printf 'FROM scratch\nCOPY root/ /\n' > "$CTX/Dockerfile"
CHANGE=$CTX/root/opt/rust/doc/std/index.html
GROW=$CTX/root/opt/rust/doc/core/index.html
SIZE_MIB=$(du -sm "$CTX/root" | cut -f1)
FILES=$(find "$CTX/root" -type f | wc -l)
printf 'name = "%s"\ntag = "bench"\n[config]\ncmd = ["/opt/rust/lib/x86_64-unknown-linux-gnu/bin/rust-lld"]\n' "$TAG" > "$WORK/spec.toml"
echo "content: $SIZE_MIB MiB, $FILES files; runs per case: $RUNS; work dir: $WORK" >&2

# --- closure content (Nix store paths) ----------------------------------------
# store_add DIR: adds DIR to the store; the store path in $REPLY.
store_add() {
    REPLY=$(nix-store --add "$1") || { echo "bench-image: nix-store --add $1 failed (root needed)" >&2; exit 1; }
    STORE_ADDED+=("$REPLY")
}
# make_root PATH...: a store path (text file) referencing every PATH, in $REPLY.
make_root() {
    local expr='builtins.toFile "vibesys-bench-root" (builtins.concatStringsSep "\n" [' p
    for p in "$@"; do expr+=" \"\${builtins.storePath \"$p\"}\""; done
    expr+=' ])'
    REPLY=$(nix-instantiate --eval --read-write-mode --json -E "$expr" | tr -d '"') ||
        { echo "bench-image: nix-instantiate failed" >&2; exit 1; }
    STORE_ADDED+=("$REPLY")
}
# write_graph ROOT FILE: ROOT's closure in exportReferencesGraph's format.
write_graph() {
    local p refs
    for p in $(nix-store --query --requisites "$1" | sort); do
        refs=$(nix-store --query --references "$p")
        printf '%s\n\n%s\n' "$p" "$(grep -c . <<<"$refs" || true)"
        [[ -z $refs ]] || printf '%s\n' "$refs"
    done > "$2"
}
if [[ $CLOSURE != 0 ]]; then
    SRC=$WORK/store-src
    rm -rf "$SRC"; mkdir -p "$SRC"
    # Store paths of ~12 MiB: the tree cut into units (a file, or a whole
    # directory of at most 12 MiB), packed in path order into groups of at
    # most 12 MiB. Hard links, no copy.
    R=$CTX/root/opt/rust
    find "$R" -mindepth 1 -printf '%y\t%s\t%P\n' | LC_ALL=C sort -t$'\t' -k3,3 |
        awk -F'\t' -v limit=$((12 << 20)) '
        { n++; path[n] = $3; isdir[$3] = ($1 == "d"); total[$3] = ($1 == "d" ? 0 : $2) }
        END {
            for (i = n; i >= 1; i--) { p = path[i]; q = p; if (sub(/\/[^\/]*$/, "", q)) total[q] += total[p] }
            g = 0; size = 0
            for (i = 1; i <= n; i++) {
                p = path[i]; q = p
                if (sub(/\/[^\/]*$/, "", q) && (unit[q] || inside[q])) { inside[p] = 1; continue }
                if (isdir[p] && total[p] > limit) continue
                unit[p] = 1
                if (size > 0 && size + total[p] > limit) { g++; size = 0 }
                size += total[p]; printf "%02d\t%s\n", g, p
            }
        }' > "$WORK/units"
    for g in $(cut -f1 "$WORK/units" | sort -u); do
        mkdir -p "$SRC/rust-$g"
        awk -F'\t' -v g="$g" '$1 == g { print $2 }' "$WORK/units" | tr '\n' '\0' |
            (cd "$R" && xargs -0 cp -al --parents -t "$SRC/rust-$g")
    done
    CHANGE_GROUP=$(find "$SRC" -path "*/doc/std/index.html" -print -quit)
    CHANGE_GROUP=${CHANGE_GROUP%/doc/std/index.html}
    declare -A STORE
    for g in "$SRC"/*; do store_add "$g"; STORE[$(basename "$g")]=$REPLY; done
    make_root "${STORE[@]}"
    write_graph "$REPLY" "$WORK/graph"
    printf 'name = "%s"\ntag = "bench"\n[config]\ncmd = ["/bin/sh"]\n' "$TAG" > "$WORK/spec-closure.toml"
    echo "closure: ${#STORE[@]} store paths + root; the changed one: $(du -sm "$CHANGE_GROUP" | cut -f1) MiB" >&2
fi
# change_store_path: the store path holding the changed file replaced by a
# new one with the file changed; a new root; $WORK/graph updated.
change_store_path() {
    local g new
    g=$(basename "$CHANGE_GROUP")
    new=$WORK/change/$RANDOM$RANDOM/$g
    mkdir -p "$(dirname "$new")"
    cp -a "$CHANGE_GROUP" "$new"          # a copy: the old store path stays as it was
    chmod -R u+w "$new"
    printf '<!-- %s -->\n' "$RANDOM$RANDOM" >> "$new/doc/std/index.html"
    CHANGE_GROUP=$new
    store_add "$new"; STORE[$g]=$REPLY
    make_root "${STORE[@]}"
    write_graph "$REPLY" "$WORK/graph"
}

# --- measuring ---------------------------------------------------------------
# run LABEL CMD...: appends "seconds max_rss_kib" for one command to $WORK/LABEL.raw.
# Wall time from bash's microsecond clock (time(1) rounds to 10 ms), peak
# RSS from time(1).
run() {
    local label=$1 t0 t1; shift
    t0=$EPOCHREALTIME
    /usr/bin/time -f '%M' -o "$WORK/.time" "$@" >/dev/null 2>"$WORK/.err" || {
        echo "bench-image: $label failed:" >&2; cat "$WORK/.err" >&2; exit 1; }
    t1=$EPOCHREALTIME
    echo "$(echo "$t1 - $t0" | bc -l) $(cat "$WORK/.time")" >> "$WORK/$label.raw"
}
# A case may be several commands: sum the times, take the max RSS.
case_begin() { : > "$WORK/.case"; }
case_step() { run .step "$@"; tail -n1 "$WORK/.step.raw" >> "$WORK/.case"; }
case_end() { awk '{t+=$1; if ($2>m) m=$2} END {print t, m}' "$WORK/.case" >> "$WORK/$1.txt"; }
# warm DIR...: reads every file below DIR once (into the page cache).
warm() { find "$@" -type f -print0 | xargs -0 cat > /dev/null; }
change_one_file() { printf '<!-- %s -->\n' "$RANDOM$RANDOM" >> "$CHANGE"; }
grow_one_file() { printf '<!-- %s -->\n' "$(head -c 196608 /dev/urandom | base64 -w0)" >> "$GROW"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
maxcol() { awk '{if ($2>m) m=$2} END {print m}'; }
rm -f "$WORK"/*.txt "$WORK"/*.raw
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)" >&2

# archive_cases NAME BIN: BIN's archive cases (cold, one file changed,
# a file grown right after the last build and after sync), as NAME-cold ...
archive_cases() {
    local name=$1 bin=$2 out=$WORK/$1.tar cache=$WORK/cache-$1
    rm -rf "$cache" "$out"
    sync; warm "$CTX/root"
    case_begin; case_step "$bin" image build "$WORK/spec.toml" --out "$out" --root "$CTX/root" --cache "$cache"; case_end "$name-cold"
    change_one_file
    case_begin; case_step "$bin" image build "$WORK/spec.toml" --out "$out" --root "$CTX/root" --cache "$cache"; case_end "$name-inc"
    if [[ $name == vibesys ]]; then
        # What writing the archive whole costs (a rebuild used to).
        case_begin; case_step cp "$out" "$WORK/cp.tar"; case_end cp-archive
        rm -f "$WORK/cp.tar"
    fi
    grow_one_file
    case_begin; case_step "$bin" image build "$WORK/spec.toml" --out "$out" --root "$CTX/root" --cache "$cache"; case_end "$name-grow"
    sync
    grow_one_file
    case_begin; case_step "$bin" image build "$WORK/spec.toml" --out "$out" --root "$CTX/root" --cache "$cache"; case_end "$name-grow-synced"
}

for i in $(seq "$RUNS"); do
    echo "run $i/$RUNS" >&2
    # vibesys (and each baseline, in a fresh random order) cold, then one
    # file changed (warm cache), then a file grown.
    order=(vibesys "${BASELINES[@]}")
    for b in $(printf '%s\n' "${!order[@]}" | shuf); do
        if [[ $b == 0 ]]; then archive_cases vibesys "$VIBESYS"
        else archive_cases "$(basename "${order[b]}")" "${order[b]}"; fi
    done

    # vibesys to an OCI layout directory: unchanged layers are hard links
    # to the cache, so a rebuild writes only what changed.
    rm -rf "$WORK/cache-oci" "$WORK/v-oci"
    sync; warm "$CTX/root"
    case_begin; case_step "$VIBESYS" image build "$WORK/spec.toml" --out "$WORK/v-oci" --format oci --root "$CTX/root" --cache "$WORK/cache-oci"; case_end vibesys-oci-cold
    change_one_file
    case_begin; case_step "$VIBESYS" image build "$WORK/spec.toml" --out "$WORK/v-oci" --format oci --root "$CTX/root" --cache "$WORK/cache-oci"; case_end vibesys-oci-inc

    # vibesys from a references graph (store paths keyed by name), to an
    # OCI directory and to the archive; the store path change happens
    # between the cold and the incremental build, outside the timing.
    if [[ $CLOSURE != 0 ]]; then
        for fmt in oci archive; do
            out=$WORK/c-$fmt; [[ $fmt == oci ]] || out=$WORK/c.tar
            rm -rf "$WORK/cache-c" "$out"
            sync; warm "${STORE[@]}"
            case_begin; case_step "$VIBESYS" image build "$WORK/spec-closure.toml" --out "$out" --format "$fmt" --references-graph "$WORK/graph" --cache "$WORK/cache-c"; case_end "closure-$fmt-cold"
            change_store_path
            case_begin; case_step "$VIBESYS" image build "$WORK/spec-closure.toml" --out "$out" --format "$fmt" --references-graph "$WORK/graph" --cache "$WORK/cache-c"; case_end "closure-$fmt-inc"
        done
    fi

    [[ $PEERS != 0 ]] || continue
    # umoci + skopeo cold, then one file changed (insert again).
    rm -rf "$WORK/layout" "$WORK/u.tar"
    sync; warm "$CTX/root"
    case_begin
    case_step umoci init --layout "$WORK/layout"
    case_step umoci new --image "$WORK/layout:bench"
    case_step umoci insert --image "$WORK/layout:bench" "$CTX/root/opt" /opt
    case_step skopeo copy "oci:$WORK/layout:bench" "docker-archive:$WORK/u.tar:$TAG:bench"
    case_end umoci-cold
    change_one_file
    rm -f "$WORK/u.tar"
    case_begin
    case_step umoci insert --image "$WORK/layout:bench" "$CTX/root/opt" /opt
    case_step skopeo copy "oci:$WORK/layout:bench" "docker-archive:$WORK/u.tar:$TAG:bench"
    case_end umoci-inc
done

# docker build cold (no cache), then one file changed (cache on), in a loop
# of their own after every other case: the Engine removes an image's layers
# and collects containerd's content after `docker rmi` returns, past any
# `sync`, and that writing slowed the next vibesys cold build (1.79 s with
# the docker cases between the rounds, 1.27 s with them last, the other
# cases the same; 2026-12-03, docs/images.md).
[[ $PEERS != 0 ]] || DOCKER_RUNS=0
for i in $(seq "$DOCKER_RUNS"); do
    echo "docker run $i/$DOCKER_RUNS" >&2
    docker rmi -f "$TAG:cold" "$TAG:inc" >/dev/null 2>&1 || true
    sync; warm "$CTX"
    case_begin; case_step docker build --no-cache -q -t "$TAG:cold" "$CTX"; case_end docker-cold
    change_one_file
    case_begin; case_step docker build -q -t "$TAG:inc" "$CTX"; case_end docker-inc
    docker rmi -f "$TAG:cold" "$TAG:inc" >/dev/null 2>&1 || true
done

# --- floor -------------------------------------------------------------------
# Hash rate per core: the faster of sha256sum and openssl on 256 MiB held
# in the page cache, by CPU time (user + sys: the CPU's rate even when the
# machine is shared).
HASHFILE=$WORK/.floor-hash
head -c $((256 << 20)) /dev/urandom > "$HASHFILE"
cat "$HASHFILE" > /dev/null
secs() { /usr/bin/time -f '%U %S' -o "$WORK/.hash-time" "$@" > /dev/null 2>&1; awk '{print $1 + $2}' "$WORK/.hash-time"; }
hash_tool=sha256sum
hash_s=$(secs sha256sum "$HASHFILE")
if command -v openssl >/dev/null; then
    o=$(secs openssl dgst -sha256 "$HASHFILE")
    if (( $(echo "$o < $hash_s" | bc -l) )); then hash_tool="openssl dgst -sha256"; hash_s=$o; fi
fi
HASH_MBS=$(echo "256 * 1.048576 / $hash_s" | bc -l)
rm -f "$HASHFILE"
# Disk write rate: 512 MiB written and synced.
t0=$EPOCHREALTIME
dd if=/dev/zero of="$WORK/.floor-dd" bs=1M count=512 conv=fdatasync status=none
WRITE_MBS=$(echo "512 * 1.048576 / ($EPOCHREALTIME - $t0)" | bc -l)
rm -f "$WORK/.floor-dd"
ARCHIVE_MB=$(echo "$(stat -c %s "$WORK/vibesys.tar") / 1000000" | bc -l)
CORES=$(nproc)
floor_hash=$(echo "$ARCHIVE_MB / ($HASH_MBS * $CORES)" | bc -l)
floor_write=$(echo "$ARCHIVE_MB / $WRITE_MBS" | bc -l)
med_floor=$(echo "if ($floor_hash > $floor_write) $floor_hash else $floor_write" | bc -l)

# --- report ------------------------------------------------------------------
cases=(vibesys-cold vibesys-inc cp-archive vibesys-grow vibesys-grow-synced vibesys-oci-cold vibesys-oci-inc)
[[ $CLOSURE == 0 ]] || cases+=(closure-oci-cold closure-oci-inc closure-archive-cold closure-archive-inc)
for b in "${BASELINES[@]}"; do
    n=$(basename "$b")
    cases+=("$n-cold" "$n-inc" "$n-grow" "$n-grow-synced")
done
cases+=(umoci-cold umoci-inc docker-cold docker-inc)
printf '\n%-20s %10s %8s %8s %6s %14s\n' case median_s min_s max_s runs peak_rss_MiB
for c in "${cases[@]}"; do
    [[ -s $WORK/$c.txt ]] || continue
    m=$(cut -d' ' -f1 "$WORK/$c.txt" | median)
    lo=$(cut -d' ' -f1 "$WORK/$c.txt" | sort -n | head -n1)
    hi=$(cut -d' ' -f1 "$WORK/$c.txt" | sort -n | tail -n1)
    r=$(maxcol < "$WORK/$c.txt")
    printf '%-20s %10.3f %8.3f %8.3f %6d %14.1f\n' "$c" "$m" "$lo" "$hi" "$(wc -l < "$WORK/$c.txt")" "$(echo "$r/1024" | bc -l)"
    eval "med_${c//-/_}=$m"
done
echo
# ratio A B / pct A B: median A over median B (variable name suffixes).
ratio() { local a=med_$1 b=med_$2; [[ -n ${!a:-} && -n ${!b:-} ]] && echo "$(echo "scale=2; ${!a} / ${!b}" | bc -l)x" || echo n/a; }
ratio3() { local a=med_$1 b=med_$2; [[ -n ${!a:-} && -n ${!b:-} ]] && echo "$(echo "scale=3; ${!a} / ${!b}" | bc -l)x" || echo n/a; }
pct() { local a=med_$1 b=med_$2; [[ -n ${!a:-} && -n ${!b:-} ]] && echo "$(echo "scale=1; 100 * ${!a} / ${!b}" | bc -l)%" || echo n/a; }
printf 'floor of a cold build (%.0f MB archive): %.3f s = max(hash %.3f s: %s at %.0f MB/s per core x %d cores; write %.3f s at %.0f MB/s)\n' \
    "$ARCHIVE_MB" "$med_floor" "$floor_hash" "$hash_tool" "$HASH_MBS" "$CORES" "$floor_write" "$WRITE_MBS"
echo "  cold vibesys archive / floor:         $(ratio vibesys_cold floor) (target <= 1.3x)"
echo "  cold vibesys OCI dir / floor:         $(ratio vibesys_oci_cold floor)"
echo "one file changed, vibesys incremental / cold:"
echo "  --root, archive:                      $(pct vibesys_inc vibesys_cold)"
echo "  --root, OCI directory:                $(pct vibesys_oci_inc vibesys_oci_cold)"
echo "  --root, archive, a file grown by 256 KiB: $(pct vibesys_grow vibesys_cold) right after the last build, $(pct vibesys_grow_synced vibesys_cold) after sync"
if [[ $CLOSURE != 0 ]]; then
    echo "  references graph, OCI directory:      $(pct closure_oci_inc closure_oci_cold)"
    echo "  references graph, archive:            $(pct closure_archive_inc closure_archive_cold)"
fi
echo "  cp of the archive (writing it whole):  $(pct cp_archive vibesys_cold)"
for b in "${BASELINES[@]}"; do
    n=$(basename "$b") v=${n//-/_}
    echo "vibesys / $n (the same rounds):"
    echo "  cold: $(ratio3 vibesys_cold "${v}_cold"); one file changed: $(ratio3 vibesys_inc "${v}_inc"); grown: $(ratio3 vibesys_grow "${v}_grow"); grown after sync: $(ratio3 vibesys_grow_synced "${v}_grow_synced")"
done
echo "peers / vibesys:"
echo "  cold, umoci+skopeo / vibesys archive: $(ratio umoci_cold vibesys_cold)"
echo "  cold, umoci+skopeo / vibesys OCI dir: $(ratio umoci_cold vibesys_oci_cold)"
echo "  cold, docker build / vibesys archive: $(ratio docker_cold vibesys_cold)"
echo "  one file changed, umoci+skopeo / vibesys archive: $(ratio umoci_inc vibesys_inc)"
echo "  one file changed, docker build / vibesys archive: $(ratio docker_inc vibesys_inc)"
echo "  one file changed, umoci+skopeo / vibesys OCI dir: $(ratio umoci_inc vibesys_oci_inc)"
echo "(peak RSS of docker build is the CLI's; the daemon's work is not counted)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
