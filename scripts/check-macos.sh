#!/usr/bin/env bash
# Type-checks the macOS code (Seatbelt, the macOS defaults of the selector,
# everything behind cfg(target_os = "macos")) from Linux: cargo clippy, which
# is cargo check plus the lints, with -D warnings, of every crate a macOS
# build confines with, for aarch64-apple-darwin, lib and tests.
#
# Only crates free of C code are checked: a build script that compiles C
# (zstd-sys, blake3's NEON code) needs the macOS SDK, which Linux has not.
# That is why vs-sandbox takes the pin types from vs-pin and not from
# vs-image. tests/architecture.rs checks that every crate whose sources
# name target_os = "macos" is in MACOS_CRATES.
#
# Installs the target's standard library with rustup when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-apple-darwin
MACOS_CRATES=(vs-pin vs-sandbox vs-docker vs-agent agentshim)

if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed | grep -x "$target" >/dev/null; then
        echo "check-macos.sh: installing the Rust target $target (rustup target add)" >&2
        if ! rustup target add "$target" >&2; then
            echo "check-macos.sh: error: cannot install the Rust target $target with rustup" \
                "(offline? run \`rustup target add $target\` where the network is reachable)" >&2
            exit 1
        fi
    fi
else
    sysroot=$(rustc --print sysroot)
    if [ ! -d "$sysroot/lib/rustlib/$target" ]; then
        echo "check-macos.sh: error: the Rust target $target is not installed and rustup is" \
            "not available to add it; install rustup (https://rustup.rs)" >&2
        exit 1
    fi
fi

packages=()
for c in "${MACOS_CRATES[@]}"; do packages+=(-p "$c"); done
echo "check-macos.sh: cargo clippy --target $target for ${MACOS_CRATES[*]}" >&2
cargo clippy --target "$target" "${packages[@]}" --all-targets -- -D warnings
