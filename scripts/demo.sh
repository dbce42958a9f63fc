#!/usr/bin/env bash
# The main job on an embedded default: confine a shell in a sample project
# with hidden and read-only paths, and show what the confined process
# could and could not do. Installs bubblewrap when missing (as root).
# Default run environment: Docker. The editor image is built locally with
# vs-image (`vibesys image build images/editor.toml`), loaded over the
# Engine API (`vibesys image load`) and the session runs in a container
# from it. Where no Docker Engine answers, bubblewrap is the fallback (and
# the script says so).
#   scripts/demo.sh [--confine docker|bwrap|landlock]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
confine=auto
[ "${1:-}" = "--confine" ] && confine=${2:?--confine needs a value}
if [ "$confine" = auto ]; then
  if command -v docker >/dev/null 2>&1 && docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    confine=docker
  else
    echo "demo: no Docker Engine answers here; falling back to bubblewrap (--confine bwrap)" >&2
    confine=bwrap
  fi
fi
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "demo: bubblewrap is missing: sudo apt-get install bubblewrap" >&2; exit 1
  fi
fi
cargo build --release -q -p vibesys --manifest-path "$root/Cargo.toml"
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$root/Cargo.toml" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
vibesys="$target_dir/release/vibesys"

# The sample project (outside /tmp, so Landlock accepts it too).
proj="$target_dir/demo-project"
rm -rf "$proj"
mkdir -p "$proj/src" "$proj/evaluator" "$proj/secrets"
echo 'fn main() {}' > "$proj/src/main.rs"
echo 'score = run(candidate)' > "$proj/evaluator/score.py"
echo 'API_KEY=sk-demo-123' > "$proj/secrets/api.env"
echo 'hunter2' > "$proj/.netrc"
cat > "$proj/vibesys.toml" <<'TOML'
[sandbox]
read_only = ["evaluator"]
hidden = ["secrets", ".netrc"]
TOML
git -C "$proj" init -q
if [ "$confine" = docker ]; then
  # Build the editor image from local files (busybox-static on the host;
  # nothing is pulled) and load it into the Engine, checked against the lock.
  [ -x /bin/busybox ] || { [ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
  mkdir -p "$target_dir/images"
  echo "== vibesys image build images/editor.toml"
  "$vibesys" image build "$root/images/editor.toml" --out "$target_dir/images/editor.tar" | sed -n '1,3p'
  lock="$root/images/images.lock"
  if ! "$vibesys" image verify "$target_dir/images/editor.tar" --lock "$lock" >/dev/null 2>&1; then
    # The host's busybox differs from the one images.lock was pinned with:
    # pin this local build in a demo lock (never in the repository's).
    lock="$target_dir/images/demo.lock"
    rm -f "$lock"
    "$vibesys" image pin "$target_dir/images/editor.tar" --lock "$lock" >/dev/null
    echo "  (this host's build differs from images/images.lock; pinned in $lock for the demo)"
  fi
  export VIBESYS_IMAGES_LOCK=$lock
  echo "== vibesys image load"
  "$vibesys" image load "$target_dir/images/editor.tar" --lock "$lock"
  echo
fi
cd "$proj"
echo "== vibesys doctor"
"$vibesys" doctor || true
echo
echo "== the plan (vibesys policy show --backend $confine)"
if [ "$confine" = docker ]; then
  "$vibesys" policy show --backend docker | sed -n '1,13p'
else
  "$vibesys" policy show --backend "$confine" | sed -n '1,4p'
fi
echo
echo "== a confined shell session in $proj"
# The session's script: each line says what it tried and what happened.
"$vibesys" exec --confine "$confine" -- sh -c '
try() { desc=$1; shift; if "$@" >/dev/null 2>&1; then echo "  ALLOWED  $desc"; else echo "  denied   $desc"; fi; }
try "edit the project (src/main.rs)"            sh -c "echo // edited >> src/main.rs"
try "read the evaluator (evaluator/score.py)"   cat evaluator/score.py
try "change the evaluator"                      sh -c "echo cheat >> evaluator/score.py"
try "see a hidden file (secrets/api.env)"        test -s secrets/api.env
try "write into the hidden dir"                  sh -c "echo x > secrets/new"
try "read the hidden .netrc"                     grep -q hunter2 .netrc
try "read /etc/shadow"                           cat /etc/shadow
try "read /root/.bashrc"                         cat /root/.bashrc
try "reach the Docker socket"                    test -S /var/run/docker.sock
try "create a nested user namespace"             unshare -U true
try "rename .git away"                           mv .git .git-away
'
echo
echo "== after the session, on the host"
echo "  src/main.rs:        $(tail -n1 src/main.rs)"
echo "  evaluator/score.py: $(cat evaluator/score.py)"
echo "  secrets/api.env:    $(cat secrets/api.env)"
