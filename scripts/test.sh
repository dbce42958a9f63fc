#!/usr/bin/env bash
# Runs every check CI runs: installs what the tests need, then cargo fmt
# --check, clippy with -D warnings, and the whole test suite (real bwrap,
# Landlock, Docker, skopeo, umoci, Nix; nothing mocked, nothing skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export VIBESYS_REQUIRE_ALL_TESTS=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
