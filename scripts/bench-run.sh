#!/usr/bin/env bash
# Framework overhead of `vibesys run`: everything but the agent and the
# user's commands. Two candidates, --jobs 2, docker run environment, with
# trivial commands (agent, check: `sh -c true`; measure: `echo {}`), against
# the same steps done by hand in the same run: per candidate `git worktree
# add`, a container for the agent's turn (`docker run -d` + `docker exec`),
# `git add -A` + `git commit`, `sha256sum` of the protected paths against a
# baseline, a fresh checkout of the commit for the evaluation (`git
# worktree add`) and a fresh container for each of check and measure
# (`docker run -d` + `docker exec`), `docker rm -f`, `git worktree remove`
# (worktree changes one at a time under `flock`, as vibesys makes them).
# Then the host run environment, where check and measure are confined by
# bubblewrap: `vibesys run --run-environment host` against the same steps
# by hand (bwrap for the agent's turn), once with check and measure
# unconfined ("before") and once each under bwrap ("after"), so the cost
# of the evaluation's confinement shows in the same run. Medians of
# several runs, the ratio by-hand/vibesys (>= 1 means vibesys is no
# slower), and the machine's floor (one `docker run --rm IMAGE true`, one
# `docker exec CTR true`, one `bwrap ... true`).
# Needs a running Docker Engine, hyperfine, busybox-static, bubblewrap and git.
#   scripts/bench-run.sh                      (BENCH_RUNS=10)
#   VIBESYS_BIN=path/to/vibesys scripts/bench-run.sh   (skip the static build)
#   VIBESYS_BEFORE_BIN=path/to/older/vibesys  (also time an older build's host run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${BENCH_RUNS:-10}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
for tool in docker hyperfine python3 git bwrap; do
  command -v "$tool" >/dev/null || { echo "bench-run: $tool missing (Debian: docker.io, hyperfine, git, bubblewrap)" >&2; exit 1; }
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
  flock "$work/wt.lock" git worktree add -q --detach "\$wt" HEAD
  a=\$(docker run -d --rm -i --label vibesys-bench-run=$$ --network none --cap-drop ALL --user "\$(id -u):\$(id -g)" -v "\$wt:\$wt" -w "\$wt" "\$img" sh -c 'read _')
  docker exec "\$a" sh -c true
  docker rm -f "\$a" >/dev/null
  git -C "\$wt" add -A
  git -C "\$wt" -c user.name=b -c user.email=b@example.invalid commit -q --allow-empty -m "candidate \$c"
  (cd "\$wt" && find evaluator -type f -print0 | sort -z | xargs -0 sha256sum) | cmp -s - "$work/baseline.sha"
  ev=$work/ev-\$c-\$\$
  flock "$work/wt.lock" git worktree add -q --detach "\$ev" "\$(git -C "\$wt" rev-parse HEAD)"
  for cmd in true 'echo {}'; do
    e=\$(docker run -d --rm -i --label vibesys-bench-run=$$ --network none --cap-drop ALL --user "\$(id -u):\$(id -g)" -v "\$ev:\$ev" -w "\$ev" "\$img" sh -c 'read _')
    docker exec "\$e" sh -c "\$cmd" >/dev/null
    docker rm -f "\$e" >/dev/null
  done
  flock "$work/wt.lock" git worktree remove --force "\$ev"
  flock "$work/wt.lock" git worktree remove --force "\$wt"
}
one 1 & p1=\$!
one 2 & p2=\$!
wait \$p1; wait \$p2
SH
chmod +x "$work/by-hand.sh"
floor_ctr=$(docker run -d --rm -i --label "vibesys-bench-run=$$" "$id" sh -c 'read _')

# The host environment by hand: bwrap for the agent's turn; check and
# measure run directly (EVAL=plain, "before") or each under bwrap with
# the checkout writable, the evaluator read-only and a fresh HOME
# (EVAL=bwrap, "after").
cat > "$work/by-hand-host.sh" <<SH
#!/usr/bin/env bash
set -euo pipefail
proj=$proj
cd "\$proj"
box() { dir=\$1; shift; bwrap --ro-bind /usr /usr --ro-bind /etc /etc --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp --bind "\$dir" "\$dir" --chdir "\$dir" --unshare-all --die-with-parent --new-session --cap-drop ALL "\$@"; }
one() {
  c=\$1
  wt=$work/hwt-\$c-\$\$
  flock "$work/wt.lock" git worktree add -q --detach "\$wt" HEAD
  box "\$wt" sh -c true
  git -C "\$wt" add -A
  git -C "\$wt" -c user.name=b -c user.email=b@example.invalid commit -q --allow-empty -m "candidate \$c"
  (cd "\$wt" && find evaluator -type f -print0 | sort -z | xargs -0 sha256sum) | cmp -s - "$work/baseline.sha"
  ev=$work/hev-\$c-\$\$
  flock "$work/wt.lock" git worktree add -q --detach "\$ev" "\$(git -C "\$wt" rev-parse HEAD)"
  home=\$(mktemp -d)
  for cmd in true 'echo {}'; do
    if [ "\$EVAL" = bwrap ]; then
      box "\$ev" --ro-bind "\$ev/evaluator" "\$ev/evaluator" --bind "\$home" "\$home" --setenv HOME "\$home" sh -c "\$cmd" >/dev/null
    else
      (cd "\$ev" && HOME=\$home sh -c "\$cmd" >/dev/null)
    fi
  done
  rm -rf "\$home"
  flock "$work/wt.lock" git worktree remove --force "\$ev"
  flock "$work/wt.lock" git worktree remove --force "\$wt"
}
one 1 & p1=\$!
one 2 & p2=\$!
wait \$p1; wait \$p2
SH
chmod +x "$work/by-hand-host.sh"
# The host run's project: outside the docker one (its own run records).
hproj=$work/host-project
cp -a "$proj" "$hproj"
git -C "$hproj" worktree prune
before=()
if [ -n "${VIBESYS_BEFORE_BIN:-}" ]; then
  before=(-n "vibesys run, host (before: $VIBESYS_BEFORE_BIN)" "env VIBESYS_AGENT_SANDBOX=bwrap $VIBESYS_BEFORE_BIN run start --project $hproj --run-environment host --provider custom --candidates 2 --jobs 2 -- sh -c true")
fi

hyperfine -N --style none --runs "$runs" --warmup 1 --export-json "$work/run.json" \
  -n "vibesys run start (2 candidates)" \
  "$vibesys run start --project $proj --provider custom --candidates 2 --jobs 2 -- sh -c true" \
  -n "by hand (git worktree, docker run/exec, sha256sum)" "bash $work/by-hand.sh" \
  -n "floor: docker run --rm IMAGE true" "docker run --rm --network none $id sh -c true" \
  -n "floor: docker exec CTR true" "docker exec $floor_ctr sh -c true" \
  -n "vibesys run, host (2 candidates)" "env VIBESYS_AGENT_SANDBOX=bwrap $vibesys run start --project $hproj --run-environment host --provider custom --candidates 2 --jobs 2 -- sh -c true" \
  "${before[@]}" \
  -n "by hand, host, check and measure unconfined (before)" "env EVAL=plain bash $work/by-hand-host.sh" \
  -n "by hand, host, check and measure under bwrap (after)" "env EVAL=bwrap bash $work/by-hand-host.sh" \
  -n "floor: bwrap true" "bwrap --ro-bind / / --unshare-all --die-with-parent true" >&2

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
hv = med("vibesys run, host (2 candidates)")
hb = med("by hand, host, check and measure unconfined (before)")
ha = med("by hand, host, check and measure under bwrap (after)")
print(f"| run, host, 2 candidates, by hand with check and measure unconfined (before) | {hv:.0f} ms | {hb:.0f} ms | {hb/hv:.2f}x |")
print(f"| run, host, 2 candidates, by hand with check and measure under bwrap (after) | {hv:.0f} ms | {ha:.0f} ms | {ha/hv:.2f}x |")
print(f"| the evaluation's confinement by hand (after - before) | | {ha-hb:.0f} ms | |")
for name in res:
    if name.startswith("vibesys run, host (before"):
        print(f"| {name} | {med(name):.0f} ms | | |")
print(f"| floor: one `bwrap ... true` | {med('floor: bwrap true'):.0f} ms | | |")
PY
