# shellcheck shell=bash
# The mechanism of scripts/claude-cli.sh and scripts/codex-cli.sh: a CLI
# executable bundled in a pinned PyPI wheel, downloaded once, sha256-checked
# before every use, extracted once to a cache directory named by the
# wheel's sha256. Sourced after the caller set:
#   tool           the script's name, for messages
#   pkg version    the PyPI package and its pinned version
#   wheel_file     the wheel's file name, sha256 its pinned digest
#   members        "MEMBER=NAME ..." files of the wheel to extract (NAME
#                  below the cache directory; the first is the CLI)
#   check_version  optional: a function given the extraction directory
# Then `wheel_cli_main "$@"` prints the CLI's path (`--wheel`: the wheel's).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

say() { echo "$tool: $*" >&2; }
die() {
  say "$*"
  exit 1
}

wheel_cache() {
  local cache=${VIBESYS_SOURCES_CACHE:-}
  if [[ -z "$cache" ]]; then
    cache=/var/tmp/vibesys-image-sources
    if [[ ! -f "$cache/$pkg/${sha256:0:16}.complete" ]] &&
      ! { mkdir -p "$cache" 2>/dev/null && [[ -w "$cache" ]]; }; then
      cache=${XDG_CACHE_HOME:-${HOME:?neither VIBESYS_SOURCES_CACHE nor HOME is set}/.cache}/vibesys-image-sources
    fi
  fi
  echo "$cache"
}

# The pinned wheel, downloaded once and checked before every use.
wheel_path() {
  local cache=$1 w got tmp
  w=$cache/wheels/$wheel_file
  mkdir -p "$cache/wheels" || die "cannot create $cache/wheels (set VIBESYS_SOURCES_CACHE)"
  if [[ ! -f "$w" ]]; then
    python3 -m pip --version >/dev/null 2>&1 ||
      die "python3 -m pip is missing (apt-get install python3-pip), needed once to download $pkg==$version"
    say "downloading $pkg==$version from PyPI (once)"
    tmp=$(mktemp -d "$cache/wheels/.dl.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
      --python-version 3.11 -d "$tmp" "$pkg==$version" >&2 ||
      die "pip download $pkg==$version failed (is PyPI reachable?)"
    [[ -f "$tmp/$wheel_file" ]] || die "PyPI gave no $wheel_file: $(ls "$tmp")"
    got=$(sha256sum "$tmp/$wheel_file" | cut -d' ' -f1)
    [[ "$got" == "$sha256" ]] ||
      die "PyPI's $wheel_file has sha256 $got, images/sources.conf pins $sha256: refusing it"
    chmod 0644 "$tmp/$wheel_file"
    mv "$tmp/$wheel_file" "$w"
    rm -rf "$tmp"
    trap - EXIT
  fi
  got=$(sha256sum "$w" | cut -d' ' -f1)
  [[ "$got" == "$sha256" ]] ||
    die "$w has sha256 $got, images/sources.conf pins $sha256: refusing it (delete the file to download again)"
  echo "$w"
}

# The CLI, extracted from the checked wheel once; prints its path.
cli_path() {
  local cache=$1 w=$2 dir first
  dir=$cache/$pkg/${sha256:0:16}
  first=${members%% *}
  first=$dir/${first#*=}
  if [[ ! -f "$dir.complete" ]]; then
    mkdir -p "$cache/$pkg" || die "cannot create $cache/$pkg"
    rm -rf "$dir" "$dir.tmp"
    mkdir -p "$dir.tmp"
    # shellcheck disable=SC2086
    python3 - "$w" "$dir.tmp" $members <<'PY' || die "cannot extract the CLI from $w"
import os, shutil, sys, zipfile
wheel, dest, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for spec in members:
        member, name = spec.split("=", 1)
        out_path = os.path.join(dest, name)
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        with z.open(member) as src, open(out_path, "wb") as out:
            shutil.copyfileobj(src, out)
        os.chmod(out_path, 0o755)
PY
    if declare -F check_version >/dev/null; then check_version "$dir.tmp"; fi
    chmod -R a+rX "$dir.tmp"
    mv "$dir.tmp" "$dir"
    touch "$dir.complete"
  fi
  [[ -x "$first" ]] || die "$first is not executable (delete $dir.complete to extract it again)"
  echo "$first"
}

wheel_cli_main() {
  local want=cli cache w
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
  cache=$(wheel_cache)
  w=$(wheel_path "$cache")
  case "$want" in
  wheel) echo "$w" ;;
  cli) cli_path "$cache" "$w" ;;
  esac
}
