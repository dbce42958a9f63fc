#!/usr/bin/env bash
# Installs the clients of the modal and skypilot run environments
# (docs/remote.md): `skypilot` and `modal` from PyPI, pinned, into a venv of
# vibesys's own at $VIBESYS_TOOLS/remote-clients (default
# ${XDG_DATA_HOME:-$HOME/.local/share}/vibesys/tools/remote-clients).
# Never into the system Python, never into an agent or editor image: the
# clients and the services' credentials stay on the host.
# Idempotent: does nothing when the venv already holds exactly these pins.
# The pins must equal SKYPILOT_VERSION and MODAL_VERSION in
# crates/vs-runtime/src/remote/client.rs (a test checks).
set -euo pipefail
SKYPILOT_VERSION=0.14.1
MODAL_VERSION=1.6.4
tools="${VIBESYS_TOOLS:-${XDG_DATA_HOME:-$HOME/.local/share}/vibesys/tools}"
venv="$tools/remote-clients"
stamp="$venv/vibesys-pins.txt"
want="skypilot==$SKYPILOT_VERSION modal==$MODAL_VERSION"
if [ -x "$venv/bin/sky" ] && [ -x "$venv/bin/modal" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "remote-clients: $python not found; install Python 3.9+ with venv" >&2; exit 1; }
mkdir -p "$tools"
"$python" -m venv "$venv"
echo "remote-clients: installing $want into $venv" >&2
# shellcheck disable=SC2086
"$venv/bin/pip" install --quiet --disable-pip-version-check $want
printf '%s' "$want" > "$stamp"
