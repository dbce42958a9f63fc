#!/usr/bin/env bash
# Installs what vibesys's tests and main job need on a fresh Debian/Ubuntu
# machine (idempotent: installs only what is missing). Needs root.
#   bubblewrap       the host confinement backend
#   git              candidate worktrees and builds (2.31 or later)
#   skopeo umoci     real peers that read our OCI output
#   squashfs-tools   the squashfs rootfs output (mksquashfs, unsquashfs)
#   podman           loads our archives (tests/image_runtimes.rs)
#   charliecloud     ch-convert and ch-run run our images (same test); its
#                    builders package pulls in docker.io and squashfuse
#   busybox-static   a tiny static closure for image tests
#   gcc              compiles the seccomp probe in the confinement tests
#   hyperfine        the benchmarks (scripts/bench-*.sh)
#   nix-bin + setup  the offline Nix image test (scripts/ci-setup-nix.sh)
#   slurm-wlm munge  the single-node Slurm of the slurm run environment (scripts/slurm-up.sh)
#   debootstrap      the node image of the multi-node Slurm test cluster (scripts/slurm-cluster.sh)
#   python3-venv     the venv of the modal and skypilot clients (scripts/remote-clients.sh,
#                    which then installs skypilot and modal from PyPI, pinned, into
#                    $VIBESYS_TOOLS/remote-clients; once per machine)
#   docker-registry  the distribution registry image push/pull are tested against
#                    (tests/image_registry.rs, scripts/bench-registry.sh)
#   apache2-utils    htpasswd -B: the bcrypt htpasswd of the registry's basic auth
#   musl-tools       musl-gcc for the C code of dependencies in the static vibesys
#                    (scripts/build-static.sh: the docker and slurm tests' command server)
#   python3-pip      the download of the pinned claude-agent-sdk and openai-codex-cli-bin
#                    wheels, whose real Claude Code and Codex CLIs scripts/claude-cli.sh and
#                    scripts/codex-cli.sh extract (tests/real_cli.rs, the demo, the agent
#                    image; once per machine, sha256-checked)
#   curl python3     clients of the egress tests and scripts/bench-egress.sh
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have bwrap || need+=(bubblewrap)
have git || need+=(git)
have skopeo || need+=(skopeo)
have umoci || need+=(umoci)
have mksquashfs || need+=(squashfs-tools)
have podman || need+=(podman)
{ have ch-run && have ch-convert; } || need+=(charliecloud)
[ -x /bin/busybox ] || need+=(busybox-static)
have gcc || need+=(gcc libc6-dev)
have hyperfine || need+=(hyperfine)
have setpriv || need+=(util-linux)
have slurmctld || need+=(slurm-wlm)
have munged || need+=(munge)
have debootstrap || need+=(debootstrap)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
have musl-gcc || need+=(musl-tools)
have docker-registry || need+=(docker-registry)
have htpasswd || need+=(apache2-utils)
have curl || need+=(curl)
have python3 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "install-deps: apt-get install ${need[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(id -u)" = 0 ]; then
  # shellcheck source=scripts/ci-setup-nix.sh
  . "$(dirname "$0")/ci-setup-nix.sh"
  ci_setup_nix
fi
# The clients of the modal and skypilot run environments (a no-op when the
# pinned versions are already installed).
"$(dirname "$0")/remote-clients.sh"
# The real Claude Code and Codex CLIs of the pinned wheels (no-ops once
# extracted).
"$(dirname "$0")/claude-cli.sh" >/dev/null
"$(dirname "$0")/codex-cli.sh" >/dev/null
