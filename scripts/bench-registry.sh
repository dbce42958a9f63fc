#!/usr/bin/env bash
# Benchmark: push an image to a registry and pull it back by digest, with
# vibesys and with skopeo (the leanest registry client here), in the same
# run against the same local registry; print medians, ratios and the
# machine's floor.
#
#   scripts/bench-registry.sh                     # RUNS=3
#   BENCH_IMAGE=out/agent.tar scripts/bench-registry.sh   # the agent image
#                                                 # (scripts/images.sh builds it)
#
# Image: BENCH_IMAGE (an archive vibesys built), else an image built here
# from the Rust toolchain's lib directory (~850 MiB, uncompressed layers).
# Registry: Debian's docker-registry on 127.0.0.1 (plain HTTP, loopback),
# storage in BENCH_DIR, emptied before every cold push.
#
# Cases (each tool from an OCI layout of the image, to an OCI layout; the
# same bytes both ways: skopeo with --preserve-digests and
# --dest-oci-accept-uncompressed-layers, or it would gzip the layers):
#   push cold  vibesys image push DIR REF    | skopeo copy oci:DIR docker://REF
#   push again (every blob present)          | the same
#   pull       vibesys image pull REF@D --format oci --out D2
#                                            | skopeo copy docker://REF@D oci:D2
#              (both pull the image vibesys pushed)
# floor: hashing the image's blobs once with the fastest SHA-256 here
#   (sha256sum or openssl dgst, page-cached, by CPU time, one core): the
#   registry and the puller must each hash every byte once.
# Needs: docker-registry, skopeo, hyperfine, jq (scripts/install-deps.sh).
set -euo pipefail
RUNS=${RUNS:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VIBESYS=${VIBESYS:-$ROOT/target/release/vibesys}
[ -x "$VIBESYS" ] || (cd "$ROOT" && cargo build --release -p vibesys >&2)
for t in docker-registry skopeo hyperfine jq; do
  command -v "$t" >/dev/null || { echo "bench-registry: needs $t (scripts/install-deps.sh)" >&2; exit 1; }
done
BENCH_DIR=${BENCH_DIR:-$(mktemp -d /var/tmp/vs-bench-registry.XXXXXX)}
mkdir -p "$BENCH_DIR"
cd "$BENCH_DIR"
REG_PID=
cleanup() { [ -n "$REG_PID" ] && kill "$REG_PID" 2>/dev/null; rm -rf "$BENCH_DIR"; }
trap cleanup EXIT

if [ -n "${BENCH_IMAGE:-}" ]; then
  # The archive is an OCI layout in a tar (skopeo would recompress it).
  mkdir layout && tar -xf "$BENCH_IMAGE" -C layout
  what="$(basename "$BENCH_IMAGE")"
else
  lib=$(rustc --print sysroot)/lib
  cat > spec.toml <<'SPEC'
name = "vibesys-bench-registry"
tag = "b1"
SPEC
  "$VIBESYS" image build spec.toml --path "$lib" --format oci --out layout --no-cache >/dev/null
  what="Rust toolchain lib ($lib)"
fi
size=$(du -sb layout/blobs | cut -f1)
nblobs=$(ls layout/blobs/sha256 | wc -l)

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p storage
cat > reg.yml <<YML
version: 0.1
log: {level: error}
storage:
  filesystem: {rootdirectory: $BENCH_DIR/storage}
http: {addr: 127.0.0.1:$PORT}
YML
docker-registry serve reg.yml >/dev/null 2>&1 &
REG_PID=$!
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
R=127.0.0.1:$PORT

empty="rm -rf $BENCH_DIR/storage/docker"
# The same bytes as vibesys sends: skopeo would otherwise gzip every
# uncompressed layer on the way to a registry (and into an OCI layout).
SKOPEO_PUSH="skopeo copy -q --preserve-digests --dest-tls-verify=false"
hf() { hyperfine -N --runs "$RUNS" --export-json "$1.json" "${@:2}" >/dev/null 2>&1 || hyperfine -N --runs "$RUNS" --export-json "$1.json" "${@:2}"; }
median() { jq -r ".results[$2].median" "$1.json"; }

hf push-cold --prepare "$empty" \
  "$VIBESYS image push layout $R/bench/vs:b1" \
  "$SKOPEO_PUSH oci:layout docker://$R/bench/sk:b1"
# Both repositories filled for the warm push.
"$VIBESYS" image push layout $R/bench/vs:b1 >/dev/null
$SKOPEO_PUSH oci:layout docker://$R/bench/sk:b1 >/dev/null
REF=$("$VIBESYS" image push layout $R/bench/vs:b1)
DIGEST=${REF##*@}
hf push-again \
  "$VIBESYS image push layout $R/bench/vs:b1" \
  "$SKOPEO_PUSH oci:layout docker://$R/bench/sk:b1"
hf pull --prepare "rm -rf $BENCH_DIR/p1 $BENCH_DIR/p2" \
  "$VIBESYS image pull $REF --format oci --out $BENCH_DIR/p1" \
  "skopeo copy -q --preserve-digests --dest-oci-accept-uncompressed-layers --src-tls-verify=false docker://$R/bench/vs@$DIGEST oci:$BENCH_DIR/p2:b1"
cat layout/blobs/sha256/* > /dev/null
cpu() { { /usr/bin/time -f '%U %S' sh -c "$1" >/dev/null; } 2>&1 | tail -1 | awk '{print $1+$2}'; }
f1=$(cpu 'cat layout/blobs/sha256/* | sha256sum')
f2=$(cpu 'cat layout/blobs/sha256/* | openssl dgst -sha256')
floor=$(echo "if ($f1 < $f2) $f1 else $f2" | bc -l)

printf '\nimage: %s: %s blobs, %s MiB; %s runs; %s, %s cores\n' "$what" "$nblobs" $((size >> 20)) "$RUNS" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)"
printf '%-12s %10s %10s %7s\n' case vibesys skopeo ratio
for c in push-cold push-again pull; do
  a=$(median $c 0); b=$(median $c 1)
  printf '%-12s %9.2fs %9.2fs %7.2f\n' "$c" "$a" "$b" "$(echo "$a / $b" | bc -l)"
done
printf 'floor (sha256 of every blob once, CPU time, fastest of sha256sum/openssl): %.2fs\n' "$floor"
