#!/usr/bin/env bash
# Docker run environment benchmark, in one run (the static build):
#   1. DockerSandbox::execute of `true` (through the in-container command
#      server, a static vibesys built by scripts/build-static.sh, and
#      through the Engine's exec API) against `docker exec <ctr> true`
#      (medians, ratios);
#   2. `vibesys image load` against `docker load -i` of the same archive
#      (image removed before each run), and the no-op load when present.
#      The floor is the Engine's own work: the archive posted to
#      /images/load by curl, no client logic at all. The three commands
#      run interleaved in one hyperfine run (each round removes the image
#      and loads it with each command in turn).
# Needs a running Docker Engine, hyperfine and busybox-static.
#   scripts/bench-docker.sh            (BENCH_RUNS=100 execute iterations)
#   LOAD_ONLY=1 LOAD_RUNS=8 scripts/bench-docker.sh   (part 2 only)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${BENCH_RUNS:-100}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
for tool in docker hyperfine python3 curl; do
  command -v "$tool" >/dev/null || { echo "bench-docker: $tool missing (Debian: docker.io, hyperfine)" >&2; exit 1; }
done
docker version --format '{{.Server.Version}}' >/dev/null || { echo "bench-docker: the Docker Engine does not answer" >&2; exit 1; }

# The host binary measured is the one vibesys ships, the static build
# (since 2026-12-03; before, the glibc release build).
if [[ -z ${VIBESYS:-} ]]; then
  vibesys=$("$root/scripts/build-static.sh")
else
  vibesys=$VIBESYS
fi
work=$(mktemp -d)
ids=()
cleanup() {
  for id in "${ids[@]}"; do docker rmi -f "$id" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

exec_json='{}'
if [[ ${LOAD_ONLY:-0} != 1 ]]; then
  echo "== execute: DockerSandbox::execute vs docker exec (runs=$runs)" >&2
  # The test runs the same vibesys as the rest of the bench (VIBESYS_BIN),
  # and the command server of a release build (the tests' default static
  # binary is built for compile time: the test-static profile).
  # The host binary is that build already unless VIBESYS names another.
  static_bin=${VIBESYS_STATIC_BIN:-}
  if [[ -z $static_bin ]]; then
    if [[ -z ${VIBESYS:-} ]]; then static_bin=$vibesys; else static_bin=$("$root/scripts/build-static.sh"); fi
  fi
  exec_json=$(BENCH_RUNS=$runs VIBESYS_BIN=$vibesys VIBESYS_STATIC_BIN=$static_bin cargo test --release -q -p vibesys-tests --manifest-path "$root/Cargo.toml" \
    --test docker_bench -- --ignored --nocapture 2>/dev/null | grep '^{')
  echo "$exec_json" >&2
fi

echo "== load: vibesys image load vs docker load -i" >&2
# A unique image (own label, so its own digests) with 64 MiB of content.
name="vibesys-bench-$$"
mkdir -p "$work/root/bin" "$work/root/data"
cp /bin/busybox "$work/root/bin/busybox"
head -c $((64 << 20)) /dev/urandom > "$work/root/data/blob"
sed -e "s/^name = \"vibesys-editor\"/name = \"$name\"/" \
    -e "s/^\[config.labels\]/[config.labels]\n\"dev.vibesys.bench\" = \"$name\"/" \
    "$root/images/editor.toml" > "$work/spec.toml"
"$vibesys" image build "$work/spec.toml" --root "$work/root" --out "$work/image.tar" --no-cache >/dev/null
"$vibesys" image pin "$work/image.tar" --lock "$work/images.lock" >/dev/null
id=$(sed -n 's/^config_digest = "\(.*\)"/\1/p' "$work/images.lock" | head -n1)
ids+=("$id")
size=$(stat -c %s "$work/image.tar")
sock=$(docker context inspect --format '{{.Endpoints.docker.Host}}' 2>/dev/null || true)
sock=${sock#unix://}
sock=${sock:-/var/run/docker.sock}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)" >&2
# Interleaved: hyperfine runs one command's rounds after another, so each
# round here is one hyperfine call per command, in turn, the order rotated
# each round (no command always follows the same one). Before each load the
# image is removed and the removal's writes are let settle (sync, 0.5 s),
# so that none of them lands on the timed load.
load_runs=${LOAD_RUNS:-8}
orders=("vibesys docker floor" "docker floor vibesys" "floor vibesys docker")
for i in $(seq "$load_runs"); do
  for c in ${orders[$((i % 3))]}; do
    case $c in
      vibesys) cmd="$vibesys image load $work/image.tar --lock $work/images.lock" ;;
      docker) cmd="docker load -q -i $work/image.tar" ;;
      floor) cmd="curl -sSf --unix-socket $sock -X POST -H Content-Type:application/x-tar -T $work/image.tar http://localhost/images/load?quiet=1 -o /dev/null" ;;
    esac
    hyperfine -N --style none --runs 1 --prepare "sh -c 'docker rmi -f $id; sync; sleep 0.5'" \
      --export-json "$work/load-$c-$i.json" -n "$c" "$cmd" >/dev/null 2>&1 ||
      { echo "bench-docker: $c load failed" >&2; exit 1; }
  done
done
python3 - "$work" "$load_runs" > "$work/load.json" <<'PY'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
names = {"vibesys": "vibesys image load", "docker": "docker load -i", "floor": "curl to /images/load"}
out = []
for c, name in names.items():
    times = [json.load(open(f"{work}/load-{c}-{i}.json"))["results"][0]["times"][0] for i in range(1, n + 1)]
    out.append({"command": name, "times": times})
print(json.dumps({"results": out}))
PY
"$vibesys" image load "$work/image.tar" --lock "$work/images.lock" >/dev/null
hyperfine -N --style none --runs 20 --warmup 2 \
  --export-json "$work/noop.json" \
  -n "vibesys image load (present)" "$vibesys image load $work/image.tar --lock $work/images.lock" \
  -n "docker load -i (present)" "docker load -q -i $work/image.tar" >&2

python3 - "$exec_json" "$work/load.json" "$work/noop.json" "$size" <<'PY'
import json, statistics, sys
ex = json.loads(sys.argv[1])
load = {r["command"]: r for r in json.load(open(sys.argv[2]))["results"]}
noop = {r["command"]: r for r in json.load(open(sys.argv[3]))["results"]}
med = lambda r: statistics.median(r["times"]) * 1000
size = int(sys.argv[4])
print("| benchmark | vibesys (median) | peer (median) | ratio peer/vibesys |")
print("|---|---|---|---|")
if ex:
    a, b = ex["execute_true_median_ms"], ex["docker_exec_true_median_ms"]
    print(f"| execute `true`, command server ({ex['runs']} runs) | {a:.2f} ms | {b:.1f} ms (`docker exec`) | {b/a:.2f}x |")
    e = ex["engine_exec_true_median_ms"]
    print(f"| execute `true`, Engine exec API ({ex['runs']} runs) | {e:.1f} ms | {b:.1f} ms (`docker exec`) | {b/e:.2f}x |")
a, b = med(load["vibesys image load"]), med(load["docker load -i"])
f = med(load["curl to /images/load"])
n = len(load["vibesys image load"]["times"])
print(f"| load {size/2**20:.0f} MiB archive ({n} rounds, interleaved) | {a:.0f} ms | {b:.0f} ms (`docker load -i`) | {b/a:.2f}x (target >= 1.0) |")
print(f"| load floor: the Engine alone (curl posts the archive) | {f:.0f} ms | | vibesys/floor {a/f:.2f}x, docker/floor {b/f:.2f}x |")
a, b = med(noop["vibesys image load (present)"]), med(noop["docker load -i (present)"])
print(f"| load, image present | {a:.1f} ms | {b:.1f} ms (`docker load -i`) | {b/a:.2f}x |")
if ex:
    print(f"| DockerSandbox::start (one run) | {ex['start_ms']:.0f} ms | | |")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
