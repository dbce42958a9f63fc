#!/usr/bin/env bash
# Prints the absolute path of the real Codex CLI: the executable bundled in
# the pinned openai-codex-cli-bin wheel (codex_cli_bin/bin/codex, with the
# code-mode host and rg it runs), pinned in images/sources.conf. The wheel
# is downloaded from PyPI once, its sha256 is checked before every use, and
# the CLI is extracted once; later calls only print the path.
#
#   scripts/codex-cli.sh            the CLI's path (downloads and extracts once)
#   scripts/codex-cli.sh --wheel    the checked wheel's path instead
#   scripts/codex-cli.sh --help
#
# Environment: VIBESYS_SOURCES_CACHE, as for scripts/claude-cli.sh.
# Needs python3 (zipfile) and, the first time, `python3 -m pip` and PyPI.
# Exits 1 with the cause on stderr when the CLI cannot be had.
set -euo pipefail
# shellcheck source=images/sources.conf
. "$(dirname "$0")/../images/sources.conf"
tool=codex-cli.sh
pkg=openai-codex-cli-bin
version=$CODEX_CLI_VERSION
wheel_file=$CODEX_CLI_WHEEL
sha256=$CODEX_CLI_SHA256
members="codex_cli_bin/bin/codex=bin/codex codex_cli_bin/bin/codex-code-mode-host=bin/codex-code-mode-host codex_cli_bin/codex-path/rg=codex-path/rg"
# shellcheck source=scripts/lib/wheel-cli.sh
. "$(dirname "$0")/lib/wheel-cli.sh"
wheel_cli_main "$@"
