#!/usr/bin/env bash
# Prints the absolute path of the real Claude Code CLI: the executable
# bundled in the pinned claude-agent-sdk wheel
# (claude_agent_sdk/_bundled/claude), pinned in images/sources.conf (the
# same pin scripts/images.sh builds the agent image from). The wheel is
# downloaded from PyPI once, its sha256 is checked before every use, and the
# CLI is extracted once next to it; later calls only print the path.
#
#   scripts/claude-cli.sh            the CLI's path (downloads and extracts once)
#   scripts/claude-cli.sh --wheel    the checked wheel's path instead
#   scripts/claude-cli.sh --help
#
# Environment:
#   VIBESYS_SOURCES_CACHE  where the wheel and the extracted CLI are kept
#                          (default /var/tmp/vibesys-image-sources, shared
#                          with scripts/images.sh; readable by every user)
#
# Needs python3 (zipfile) and, the first time, `python3 -m pip` and PyPI.
# Exits 1 with the cause on stderr when the CLI cannot be had.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=images/sources.conf
. "$here/images/sources.conf"
cache=${VIBESYS_SOURCES_CACHE:-/var/tmp/vibesys-image-sources}

say() { echo "claude-cli.sh: $*" >&2; }
die() {
  say "$*"
  exit 1
}

want=cli
case "${1:-}" in
"") ;;
--wheel) want=wheel ;;
-h | --help)
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
  ;;
*) die "unknown argument $1 (try --help)" ;;
esac
[[ $# -le 1 ]] || die "too many arguments (try --help)"

# The pinned wheel, downloaded once and checked against its sha256 before
# every use; prints its path.
wheel() {
  local w=$cache/wheels/$CLAUDE_SDK_WHEEL got
  mkdir -p "$cache/wheels" || die "cannot create $cache/wheels (set VIBESYS_SOURCES_CACHE)"
  if [[ ! -f "$w" ]]; then
    python3 -m pip --version >/dev/null 2>&1 ||
      die "python3 -m pip is missing (apt-get install python3-pip), needed once to download claude-agent-sdk==$CLAUDE_SDK_VERSION"
    say "downloading claude-agent-sdk==$CLAUDE_SDK_VERSION from PyPI (once, about 180 MB)"
    local tmp
    tmp=$(mktemp -d "$cache/wheels/.dl.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
      --python-version 3.11 -d "$tmp" "claude-agent-sdk==$CLAUDE_SDK_VERSION" >&2 ||
      die "pip download claude-agent-sdk==$CLAUDE_SDK_VERSION failed (is PyPI reachable?)"
    [[ -f "$tmp/$CLAUDE_SDK_WHEEL" ]] || die "PyPI gave no $CLAUDE_SDK_WHEEL: $(ls "$tmp")"
    got=$(sha256sum "$tmp/$CLAUDE_SDK_WHEEL" | cut -d' ' -f1)
    [[ "$got" == "$CLAUDE_SDK_SHA256" ]] ||
      die "PyPI's $CLAUDE_SDK_WHEEL has sha256 $got, images/sources.conf pins $CLAUDE_SDK_SHA256: refusing it"
    chmod 0644 "$tmp/$CLAUDE_SDK_WHEEL"
    mv "$tmp/$CLAUDE_SDK_WHEEL" "$w"
    rm -rf "$tmp"
    trap - EXIT
  fi
  got=$(sha256sum "$w" | cut -d' ' -f1)
  [[ "$got" == "$CLAUDE_SDK_SHA256" ]] ||
    die "$w has sha256 $got, images/sources.conf pins $CLAUDE_SDK_SHA256: refusing it (delete the file to download again)"
  echo "$w"
}

# The CLI, extracted from the checked wheel once into a directory named by
# the wheel's sha256 (a new pin gets a new directory); prints its path.
cli() {
  local w=$1 dir cli
  dir=$cache/claude-cli/${CLAUDE_SDK_SHA256:0:16}
  cli=$dir/claude
  if [[ ! -f "$dir.complete" ]]; then
    mkdir -p "$cache/claude-cli" || die "cannot create $cache/claude-cli"
    rm -rf "$dir" "$dir.tmp"
    mkdir -p "$dir.tmp"
    python3 - "$w" "$dir.tmp" <<'EOF' || die "cannot extract the CLI from $w"
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for member, name in (("claude_agent_sdk/_bundled/claude", "claude"),
                         ("claude_agent_sdk/_bundled/claude.version", "claude.version")):
        with z.open(member) as src, open(os.path.join(dest, name), "wb") as out:
            shutil.copyfileobj(src, out)
EOF
    local v
    v=$(tr -d '\n' <"$dir.tmp/claude.version")
    [[ "$v" == "$CLAUDE_CLI_VERSION (Claude Code)" || "$v" == "$CLAUDE_CLI_VERSION" ]] ||
      die "the wheel bundles Claude Code $v, images/sources.conf says $CLAUDE_CLI_VERSION"
    chmod 0755 "$dir.tmp" "$dir.tmp/claude"
    chmod 0644 "$dir.tmp/claude.version"
    mv "$dir.tmp" "$dir"
    touch "$dir.complete"
  fi
  [[ -x "$cli" ]] || die "$cli is not executable (delete $dir.complete to extract it again)"
  echo "$cli"
}

w=$(wheel)
case "$want" in
wheel) echo "$w" ;;
cli) cli "$w" ;;
esac
