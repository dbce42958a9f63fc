#!/usr/bin/env bash
# Framework overhead of `vibesys run`: everything but the agent and the
# user's commands. Two candidates, --jobs 2, docker run environment, with
# trivial commands (agent, check: `sh -c true`; measure: `echo {}`), against
# the same steps done by hand in the same run: per candidate `git worktree
# add`, a container for the agent's turn (`docker run -d` + `docker exec`),
# `git add -A` + `git commit`, `sha256sum` of the protected paths against a
# baseline, a fresh container for check and measure (`docker exec`),
# `docker rm -f`, `git worktree remove`. Medians of several runs, the ratio
# by-hand/vibesys (>= 1 means vibesys is no slower), and the machine's
# floor (one `docker run --rm IMAGE true`, one `docker exec CTR true`).
# Needs a running Docker Engine, hyperfine, busybox-static and git.
#   scripts/bench-run.sh                      (BENCH_RUNS=10)
#   VIBESYS_BIN=path/to/vibesys scripts/bench-run.sh   (skip the static build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${BENCH_RUNS:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
for tool in docker hyperfine python3 git; do
  command -v "$tool" >/dev/null || { echo "bench-run: $tool missing (Debian: docker.io, hyperfine, git)" >&2; exit 1; }
done
docker version --format '{{.Server.Version}}' >/dev/null || { echo "bench-run: the Docker Engine does not answer" >&2; exit 1; }
[ -x /bin/busybox ] || { echo "bench-run: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 1; }
if [ -n "${VIBESYS_BIN:-}" ]; then
  vibesys=$VIBESYS_BIN
else
  # The binary vibesys ships: the static (musl) build, as the flake's
  # `nix run .#vibesys` builds it and the other benchmarks measure.
  vibesys=$("$root/scripts/build-static.sh")
fi
work=$(mktemp -d)
name="vibesys-bench-run-$$"
id=
cleanup() {
  docker ps -aq --filter "label=dev.vibesys.image=$name" | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker ps -aq --filter "label=vibesys-bench-run=$$" | xargs -r docker rm -f >/dev/null 2>&1 || true
  [ -n "$id" ] && docker rmi -f "$id" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The image: the editor spec under a name of its own.
sed -e "s/^name = \"vibesys-editor\"/name = \"$name\"/" \
    -e "s/^\[config.labels\]/[config.labels]\n\"dev.vibesys.bench\" = \"$name\"/" \
    "$root/images/editor.toml" > "$work/spec.toml"
"$vibesys" image build "$work/spec.toml" --out "$work/image.tar" >/dev/null
"$vibesys" image pin "$work/image.tar" --lock "$work/images.lock" >/dev/null
"$vibesys" image load "$work/image.tar" --lock "$work/images.lock" >/dev/null
id=$(sed -n 's/^config_digest = "\(.*\)"/\1/p' "$work/images.lock" | head -n1)
export VIBESYS_IMAGES_LOCK=$work/images.lock VIBESYS_DOCKER_IMAGE=$name

# The project: a protected evaluator and trivial commands.
proj=$work/project
mkdir -p "$proj/evaluator"
for i in $(seq 1 20); do echo "evaluator file $i" > "$proj/evaluator/f$i.txt"; done
cat > "$proj/vibesys.toml" <<'TOML'
[task]
objective = "benchmark"
protected = ["evaluator"]
[check]
argv = ["sh", "-c", "true"]
[measure]
argv = ["sh", "-c", "echo {}"]
# As the by-hand containers (`--network none`): the trivial agent needs no
# network, and a bridge network's veth pair would be timed on one side only.
[sandbox]
network = false
TOML
git -C "$proj" init -q
"$vibesys" state init --project "$proj" >/dev/null
git -C "$proj" add -A
git -C "$proj" -c user.name=b -c user.email=b@example.invalid commit -qm bench

# The same steps by hand.
cat > "$work/by-hand.sh" <<SH
#!/usr/bin/env bash
set -euo pipefail
proj=$proj
img=$id
cd "\$proj"
(cd "\$proj" && find evaluator -type f -print0 | sort -z | xargs -0 sha256sum) > "$work/baseline.sha"
one() {
  c=\$1
  wt=$work/wt-\$c-\$\$
  git worktree add -q --detach "\$wt" HEAD
  a=\$(docker run -d --rm -i --label vibesys-bench-run=$$ --network none --cap-drop ALL --user "\$(id -u):\$(id -g)" -v "\$wt:\$wt" -w "\$wt" "\$img" sh -c 'read _')
  docker exec "\$a" sh -c true
  docker rm -f "\$a" >/dev/null
  git -C "\$wt" add -A
  git -C "\$wt" -c user.name=b -c user.email=b@example.invalid commit -q --allow-empty -m "candidate \$c"
  (cd "\$wt" && find evaluator -type f -print0 | sort -z | xargs -0 sha256sum) | cmp -s - "$work/baseline.sha"
  e=\$(docker run -d --rm -i --label vibesys-bench-run=$$ --network none --cap-drop ALL --user "\$(id -u):\$(id -g)" -v "\$wt:\$wt" -w "\$wt" "\$img" sh -c 'read _')
  docker exec "\$e" sh -c true
  docker exec "\$e" sh -c 'echo {}' >/dev/null
  docker rm -f "\$e" >/dev/null
  git worktree remove --force "\$wt"
}
one 1 & p1=\$!
one 2 & p2=\$!
wait \$p1; wait \$p2
SH
chmod +x "$work/by-hand.sh"
floor_ctr=$(docker run -d --rm -i --label "vibesys-bench-run=$$" "$id" sh -c 'read _')

hyperfine -N --style none --runs "$runs" --warmup 1 --export-json "$work/run.json" \
  -n "vibesys run start (2 candidates)" \
  "$vibesys run start --project $proj --provider custom --candidates 2 --jobs 2 -- sh -c true" \
  -n "by hand (git worktree, docker run/exec, sha256sum)" "bash $work/by-hand.sh" \
  -n "floor: docker run --rm IMAGE true" "docker run --rm --network none $id sh -c true" \
  -n "floor: docker exec CTR true" "docker exec $floor_ctr sh -c true" >&2

python3 - "$work/run.json" <<'PY'
import json, statistics, sys
res = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
med = lambda n: statistics.median(res[n]["times"]) * 1000
v = med("vibesys run start (2 candidates)")
h = med("by hand (git worktree, docker run/exec, sha256sum)")
print("| benchmark | vibesys (median) | by hand (median) | ratio by-hand/vibesys |")
print("|---|---|---|---|")
print(f"| run, 2 candidates, trivial commands | {v:.0f} ms | {h:.0f} ms | {h/v:.2f}x |")
print(f"| floor: one `docker run --rm IMAGE true` | {med('floor: docker run --rm IMAGE true'):.0f} ms | | |")
print(f"| floor: one `docker exec CTR true` | {med('floor: docker exec CTR true'):.0f} ms | | |")
PY
