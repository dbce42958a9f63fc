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
#                          with scripts/images.sh and readable by every
#                          user; for a user who cannot write there and
#                          finds no CLI in it, ~/.cache/vibesys-image-sources)
#
# Needs python3 (zipfile) and, the first time, `python3 -m pip` and PyPI.
# Exits 1 with the cause on stderr when the CLI cannot be had.
set -euo pipefail
# shellcheck source=images/sources.conf
. "$(dirname "$0")/../images/sources.conf"
tool=claude-cli.sh
pkg=claude-agent-sdk
version=$CLAUDE_SDK_VERSION
wheel_file=$CLAUDE_SDK_WHEEL
sha256=$CLAUDE_SDK_SHA256
members="claude_agent_sdk/_bundled/claude=claude claude_agent_sdk/_bundled/claude.version=claude.version"
check_version() {
  local v
  v=$(tr -d '\n' <"$1/claude.version")
  [[ "$v" == "$CLAUDE_CLI_VERSION (Claude Code)" || "$v" == "$CLAUDE_CLI_VERSION" ]] ||
    die "the wheel bundles Claude Code $v, images/sources.conf says $CLAUDE_CLI_VERSION"
}
# shellcheck source=scripts/lib/wheel-cli.sh
. "$(dirname "$0")/lib/wheel-cli.sh"
wheel_cli_main "$@"
