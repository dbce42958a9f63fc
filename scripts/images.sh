#!/usr/bin/env bash
# Builds the content of the three images without Nix and the images from
# it: a Debian `debootstrap --variant=minbase` root for editor and
# evaluator-tool, and for agent the same root plus the real Claude Code CLI
# taken from the pinned claude-agent-sdk wheel (sha256 checked before use).
# The sources are pinned in images/sources.conf; the archives land where
# images/images.lock expects them (target/images/NAME.tar), each with the
# Debian package list beside it (NAME.packages; the image's SBOM lists the
# same packages and versions).
#
#   scripts/images.sh [NAME...]     NAME: editor, agent, evaluator-tool (default: all)
#
# Environment:
#   VIBESYS_BIN            the vibesys that builds (default: target/debug/vibesys)
#   VIBESYS_SOURCES_CACHE  where roots and the wheel are kept between runs
#                          (default /var/tmp/vibesys-image-sources); a root is
#                          reused while its suite and package list are unchanged
#   IMAGES_OUT             output directory (default: target/images)
#   DEBIAN_MIRROR          default: the machine's apt source, else deb.debian.org
#   SOURCE_DATE_EPOCH      every timestamp of the image (default 1)
#
# Needs root (debootstrap), debootstrap, and for agent python3 -m pip (the
# wheel download, once). The Debian mirror moves (point releases, security
# updates): a fresh root may then hold newer package versions than the
# lock's; `vibesys image verify` names them.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=images/sources.conf
. "$here/images/sources.conf"
vibesys=${VIBESYS_BIN:-$here/target/debug/vibesys}
cache=${VIBESYS_SOURCES_CACHE:-/var/tmp/vibesys-image-sources}
out=${IMAGES_OUT:-$here/target/images}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1}
mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)}
mirror=${mirror:-http://deb.debian.org/debian}
# Bump when normalise() changes: cached roots are then rebuilt.
normalise_version=1

say() { echo "images.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(editor agent evaluator-tool)
for n in "${names[@]}"; do
  case "$n" in editor | agent | evaluator-tool) ;; *) die "unknown image $n (editor, agent, evaluator-tool)" ;; esac
done
[[ -x "$vibesys" ]] || die "no vibesys at $vibesys (cargo build -p vibesys, or set VIBESYS_BIN)"
command -v debootstrap >/dev/null || die "debootstrap missing (apt-get install debootstrap)"
[[ "$(id -u)" == 0 ]] || die "debootstrap needs root"
mkdir -p "$cache/roots" "$cache/wheels" "$out"

# What the image never needs and what differs between two debootstraps of
# the same packages: logs, caches, apt lists, backups, host identity
# (hostname, resolv.conf, machine-id), password ages, compiled Python.
# Device nodes under /dev are not content (the builder skips them too).
normalise() {
  local r=$1
  find "$r/dev" "$r/proc" "$r/sys" "$r/run" "$r/tmp" -mindepth 1 -delete 2>/dev/null || true
  rm -rf "$r/debootstrap"
  rm -f "$r/etc/hostname" "$r/etc/resolv.conf" "$r/etc/machine-id" "$r/var/lib/dbus/machine-id" \
    "$r/etc/shadow-" "$r/etc/gshadow-" "$r/etc/passwd-" "$r/etc/group-" "$r/etc/subuid-" "$r/etc/subgid-" \
    "$r/var/cache/ldconfig/aux-cache" "$r/var/lib/dpkg/"*-old "$r/var/cache/debconf/"*-old \
    "$r/var/lib/dpkg/lock" "$r/var/lib/dpkg/lock-frontend" "$r/var/lib/apt/extended_states"
  find "$r/var/log" "$r/var/cache/apt" "$r/var/lib/apt/lists" -mindepth 1 ! -type d -delete
  rm -rf "$r/usr/share/man" "$r/usr/share/info" "$r/usr/share/locale" "$r/usr/share/lintian"
  # Docs go, their copyright files stay.
  find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  find "$r" -xdev -name __pycache__ -type d -prune -exec rm -rf {} +
  # The day the password files were written: no ageing instead.
  local f
  for f in "$r/etc/shadow"; do
    [[ -f "$f" ]] && sed -i -E 's/^([^:]*:[^:]*:)[0-9]+:/\1:/' "$f"
  done
  # The debconf database's order is a Perl hash's: sort its stanzas.
  for f in "$r/var/cache/debconf/config.dat" "$r/var/cache/debconf/templates.dat"; do
    [[ -f "$f" ]] && python3 - "$f" <<'EOF'
import sys
p = sys.argv[1]
text = open(p, encoding="utf-8", errors="surrogateescape").read()
stanzas = [s.strip("\n") for s in text.split("\n\n") if s.strip("\n")]
stanzas.sort()
open(p, "w", encoding="utf-8", errors="surrogateescape").write("\n\n".join(stanzas) + "\n\n" if stanzas else "")
EOF
  done
}

# A debootstrap root for a package list, cached by suite, list and
# normalisation; prints its path.
root_for() {
  local packages=$1 key dir
  key=$(printf '%s\n' "$DEBIAN_SUITE" "$packages" "$normalise_version" | sha256sum | cut -c1-16)
  dir=$cache/roots/$DEBIAN_SUITE-$key
  if [[ ! -f "$dir.complete" ]]; then
    rm -rf "$dir"
    say "debootstrap $DEBIAN_SUITE with $packages into $dir (once, about a minute)"
    debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$dir" "$mirror" \
      >"$dir.log" 2>&1 || {
      tail -n 20 "$dir.log" >&2
      die "debootstrap failed (log: $dir.log)"
    }
    normalise "$dir"
    touch "$dir.complete"
  fi
  echo "$dir"
}

# The pinned wheel, downloaded once and checked against its sha256 before
# every use (scripts/claude-cli.sh, the one place that fetches it); prints
# its path.
wheel() {
  VIBESYS_SOURCES_CACHE=$cache "$here/scripts/claude-cli.sh" --wheel || die "no claude-agent-sdk wheel"
}

# The base root plus the CLI from the wheel, under /opt/claude-agent-sdk
# with the wheel's dist-info (the SBOM names the wheel and its version),
# and /usr/local/bin/claude on PATH.
agent_root() {
  local base=$1 w=$2 dir
  dir=$cache/roots/agent-$(basename "$base")-${CLAUDE_SDK_SHA256:0:16}
  if [[ ! -f "$dir.complete" ]]; then
    rm -rf "$dir" "$dir.tmp"
    cp -al "$base" "$dir.tmp"
    mkdir -p "$dir.tmp/opt/claude-agent-sdk"
    python3 - "$w" "$dir.tmp/opt/claude-agent-sdk" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if n.startswith("claude_agent_sdk/_bundled/") or ".dist-info/" in n:
            z.extract(n, dest)
EOF
    local cli=/opt/claude-agent-sdk/claude_agent_sdk/_bundled/claude
    chmod 0755 "$dir.tmp$cli"
    local v
    v=$(tr -d '\n' <"$dir.tmp/opt/claude-agent-sdk/claude_agent_sdk/_bundled/claude.version")
    [[ "$v" == "$CLAUDE_CLI_VERSION (Claude Code)" || "$v" == "$CLAUDE_CLI_VERSION" ]] ||
      die "the wheel bundles Claude Code $v, images/sources.conf says $CLAUDE_CLI_VERSION"
    mkdir -p "$dir.tmp/usr/local/bin"
    ln -sfn "$cli" "$dir.tmp/usr/local/bin/claude"
    mv "$dir.tmp" "$dir"
    touch "$dir.complete"
  fi
  echo "$dir"
}

for n in "${names[@]}"; do
  # One substitution per assignment: set -e sees each failure.
  case "$n" in
  editor) root=$(root_for "$BASE_PACKAGES") ;;
  agent)
    whl=$(wheel)
    base=$(root_for "$BASE_PACKAGES")
    root=$(agent_root "$base" "$whl")
    ;;
  evaluator-tool) root=$(root_for "$BASE_PACKAGES,$EVALUATOR_TOOL_PACKAGES") ;;
  esac
  say "building $n from $root"
  "$vibesys" image build "$here/images/$n.toml" --root "$root" --out "$out/$n.tar.partial" >&2
  mv "$out/$n.tar.partial" "$out/$n.tar"
  dpkg-query --admindir="$root/var/lib/dpkg" -W -f '${Package} ${Version} ${Architecture}\n' |
    sort >"$out/$n.packages"
  echo "$out/$n.tar"
done
