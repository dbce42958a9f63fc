#!/usr/bin/env bash
# Benchmark: build the same content (>= 500 MiB in ~44k files: part of the
# Rust toolchain) into a docker-loadable image with vibesys and with the
# peers available here, cold and after changing one file; print medians,
# ratios and peak memory.
#
#   scripts/bench-image.sh            # RUNS=3 by default
#   RUNS=5 DOCKER_RUNS=3 BENCH_DIR=/var/tmp/b scripts/bench-image.sh
#
# Peers:
#   umoci:  umoci init + new + insert (gzip layer, umoci's only choice) and
#           skopeo copy to a docker-archive.
#   docker: `docker build` of a FROM scratch image with COPY of the same tree
#           (classic builder; the result is an image in the daemon, not a file).
# vibesys: `vibesys image build --root` to the default hybrid archive, layers
#           uncompressed (the default for local loading), with a layer cache.
#
# "cold": empty layer cache / fresh layout / `docker build --no-cache`.
# "one file changed": one file of the tree rewritten, then rebuilt with
# whatever reuse the tool offers (vibesys: layer cache; umoci: appends a new
# layer holding the whole tree again; docker: build cache, COPY re-runs).
#
# Needs: a release vibesys (built if missing), umoci, skopeo, docker,
# /usr/bin/time (Debian: time), rustc (for the content).
set -euo pipefail

RUNS=${RUNS:-3}
# docker build is an order of magnitude slower: fewer runs keep the script near 10 minutes.
DOCKER_RUNS=${DOCKER_RUNS:-2}
ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
VIBESYS=${VIBESYS:-}
if [[ -z $VIBESYS ]]; then
    TARGET=${CARGO_TARGET_DIR:-$ROOT_DIR/target}
    (cd "$ROOT_DIR" && cargo build --release -p vibesys >&2)
    VIBESYS=$TARGET/release/vibesys
fi
for tool in umoci skopeo docker /usr/bin/time rustc; do
    command -v "$tool" >/dev/null || { echo "bench-image: $tool not found: install it" >&2; exit 1; }
done

WORK=${BENCH_DIR:-$(mktemp -d /var/tmp/vibesys-bench.XXXXXX)}
mkdir -p "$WORK"
TAG=vibesys-bench-$$
cleanup() {
    docker rmi -f "$TAG:cold" "$TAG:inc" >/dev/null 2>&1 || true
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
SIZE_MIB=$(du -sm "$CTX/root" | cut -f1)
FILES=$(find "$CTX/root" -type f | wc -l)
printf 'name = "%s"\ntag = "bench"\n[config]\ncmd = ["/opt/rust/lib/x86_64-unknown-linux-gnu/bin/rust-lld"]\n' "$TAG" > "$WORK/spec.toml"
echo "content: $SIZE_MIB MiB, $FILES files; runs per case: $RUNS; work dir: $WORK" >&2

# --- measuring ---------------------------------------------------------------
# run LABEL CMD...: appends "seconds max_rss_kib" for one command to $WORK/LABEL.
run() {
    local label=$1; shift
    /usr/bin/time -f '%e %M' -o "$WORK/.time" "$@" >/dev/null 2>"$WORK/.err" || {
        echo "bench-image: $label failed:" >&2; cat "$WORK/.err" >&2; exit 1; }
    cat "$WORK/.time" >> "$WORK/$label.raw"
}
# A case may be several commands: sum the times, take the max RSS.
case_begin() { : > "$WORK/.case"; }
case_step() { run .step "$@"; tail -n1 "$WORK/.step.raw" >> "$WORK/.case"; }
case_end() { awk '{t+=$1; if ($2>m) m=$2} END {print t, m}' "$WORK/.case" >> "$WORK/$1.txt"; }
change_one_file() { printf '<!-- %s -->\n' "$RANDOM$RANDOM" >> "$CHANGE"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
maxcol() { awk '{if ($2>m) m=$2} END {print m}'; }
rm -f "$WORK"/*.txt "$WORK"/*.raw

for i in $(seq "$RUNS"); do
    echo "run $i/$RUNS" >&2
    # vibesys cold, then one file changed (warm cache).
    rm -rf "$WORK/cache" "$WORK/v.tar"
    sync
    case_begin; case_step "$VIBESYS" image build "$WORK/spec.toml" --out "$WORK/v.tar" --root "$CTX/root" --cache "$WORK/cache"; case_end vibesys-cold
    change_one_file
    case_begin; case_step "$VIBESYS" image build "$WORK/spec.toml" --out "$WORK/v.tar" --root "$CTX/root" --cache "$WORK/cache"; case_end vibesys-inc

    # vibesys to an OCI layout directory: unchanged layers are hard links
    # to the cache, so a rebuild writes only what changed.
    rm -rf "$WORK/cache-oci" "$WORK/v-oci"
    sync
    case_begin; case_step "$VIBESYS" image build "$WORK/spec.toml" --out "$WORK/v-oci" --format oci --root "$CTX/root" --cache "$WORK/cache-oci"; case_end vibesys-oci-cold
    change_one_file
    case_begin; case_step "$VIBESYS" image build "$WORK/spec.toml" --out "$WORK/v-oci" --format oci --root "$CTX/root" --cache "$WORK/cache-oci"; case_end vibesys-oci-inc

    # umoci + skopeo cold, then one file changed (insert again).
    rm -rf "$WORK/layout" "$WORK/u.tar"
    sync
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

    # docker build cold (no cache), then one file changed (cache on).
    (( i <= DOCKER_RUNS )) || continue
    docker rmi -f "$TAG:cold" "$TAG:inc" >/dev/null 2>&1 || true
    sync
    case_begin; case_step docker build --no-cache -q -t "$TAG:cold" "$CTX"; case_end docker-cold
    change_one_file
    case_begin; case_step docker build -q -t "$TAG:inc" "$CTX"; case_end docker-inc
    docker rmi -f "$TAG:cold" "$TAG:inc" >/dev/null 2>&1 || true
done

# --- report ------------------------------------------------------------------
printf '\n%-18s %10s %10s %14s\n' case median_s runs peak_rss_MiB
for c in vibesys-cold vibesys-inc vibesys-oci-cold vibesys-oci-inc umoci-cold umoci-inc docker-cold docker-inc; do
    m=$(cut -d' ' -f1 "$WORK/$c.txt" | median)
    r=$(maxcol < "$WORK/$c.txt")
    printf '%-18s %10.2f %10d %14.1f\n' "$c" "$m" "$(wc -l < "$WORK/$c.txt")" "$(echo "$r/1024" | bc -l)"
    eval "med_${c//-/_}=$m"
done
echo
ratio() { echo "scale=2; $1 / $2" | bc -l; }
echo "cold: umoci+skopeo / vibesys = $(ratio "$med_umoci_cold" "$med_vibesys_cold")x"
echo "cold: docker build / vibesys = $(ratio "$med_docker_cold" "$med_vibesys_cold")x"
echo "one file changed: vibesys incremental / vibesys cold = $(echo "scale=1; 100 * $med_vibesys_inc / $med_vibesys_cold" | bc -l)%"
echo "one file changed: vibesys oci-dir incremental / oci-dir cold = $(echo "scale=1; 100 * $med_vibesys_oci_inc / $med_vibesys_oci_cold" | bc -l)%"
echo "cold: umoci+skopeo / vibesys oci-dir = $(ratio "$med_umoci_cold" "$med_vibesys_oci_cold")x"
echo "one file changed: umoci+skopeo / vibesys = $(ratio "$med_umoci_inc" "$med_vibesys_inc")x"
echo "one file changed: docker build / vibesys = $(ratio "$med_docker_inc" "$med_vibesys_inc")x"
echo "(peak RSS of docker build is the CLI's; the daemon's work is not counted)"
