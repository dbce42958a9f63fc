# shellcheck shell=bash
# Setup for the Nix image test (tests/nix_image.rs).
#
# Source this file and call `ci_setup_nix`; it is idempotent (each step
# checks first, so a second call changes nothing) and returns non-zero,
# saying why, when a step fails. Needs root (apt-get, useradd).
#
#   . scripts/ci-setup-nix.sh && ci_setup_nix
#
# What the test needs and why:
#   nix-bin          nix-build, nix-store, nix-instantiate (Debian's Nix 2.8);
#                    it evaluates and builds builtins-only derivations offline
#   nixbld group     Nix as root builds as the users of `build-users-group`
#   + users          (default `nixbld`); Debian's nix-setup-systemd creates
#                    them, but it is only a Recommends of nix-bin
#   /nix             the store; root's Nix creates /nix/store itself (mode
#                    1775, group nixbld); its database is created here
#                    (`nix-store --init`) so that concurrent tests do not
#                    race to create it
#   busybox-static   /bin/busybox, the small static closure put in the image
#   file             to check that the host binary is static
#   musl target      x86_64-unknown-linux-musl, for the static vibesys that
#                    is the image derivation's builder
#   musl-tools       x86_64-linux-musl-gcc, for C code of dependencies (zstd)
#   docker           the Engine the image is loaded into; this kind of
#                    machine starts it, so it is only checked here
#
# The Nix sandbox stays off in /etc/nix/nix.conf (Debian's default); the
# test turns it on per build with `--option sandbox true`, which works as
# root on this machine.

ci_setup_nix() {
    local pkgs=() n
    command -v nix-build >/dev/null 2>&1 || pkgs+=(nix-bin)
    [ -x /bin/busybox ] || pkgs+=(busybox-static)
    command -v file >/dev/null 2>&1 || pkgs+=(file)
    command -v x86_64-linux-musl-gcc >/dev/null 2>&1 || pkgs+=(musl-tools)
    if [ ${#pkgs[@]} -gt 0 ]; then
        echo "ci-setup-nix: apt-get install ${pkgs[*]}" >&2
        apt-get update -qq >&2 || { echo "ci-setup-nix: apt-get update failed" >&2; return 1; }
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2 ||
            { echo "ci-setup-nix: apt-get install ${pkgs[*]} failed" >&2; return 1; }
    fi

    if ! getent group nixbld >/dev/null; then
        groupadd --force --system nixbld || { echo "ci-setup-nix: groupadd nixbld failed" >&2; return 1; }
    fi
    for n in 1 2 3 4 5 6 7 8 9 10; do
        if ! id "nixbld$n" >/dev/null 2>&1; then
            useradd --system --comment "Nix build user $n" --home-dir /var/empty \
                --gid nixbld --groups nixbld --no-user-group \
                --shell "$(command -v nologin || echo /usr/sbin/nologin)" "nixbld$n" ||
                { echo "ci-setup-nix: useradd nixbld$n failed" >&2; return 1; }
        fi
    done
    if command -v rustup >/dev/null 2>&1 &&
        ! rustup target list --installed | grep -x x86_64-unknown-linux-musl >/dev/null; then
        rustup target add x86_64-unknown-linux-musl >&2 ||
            { echo "ci-setup-nix: rustup target add x86_64-unknown-linux-musl failed" >&2; return 1; }
    fi

    if ! docker version >/dev/null 2>&1; then
        echo "ci-setup-nix: the Docker Engine does not answer (docker version); start it first" >&2
        return 1
    fi
    # Create the store's database now: the tests start several Nix commands
    # at once, and on a fresh machine the first of them race to create it
    # (one `nix flake metadata` failed that way in a test run).
    nix-store --init || { echo "ci-setup-nix: nix-store --init failed" >&2; return 1; }

    echo "ci-setup-nix: ready ($(nix-build --version))" >&2
}
