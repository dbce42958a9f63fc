#!/usr/bin/env bash
# Runs every check CI runs: installs what the tests need, then cargo fmt
# --check, clippy with -D warnings (for Linux, and for macOS the crates
# scripts/check-macos.sh names), and the whole test suite (real bwrap,
# Landlock, Docker, skopeo, umoci, Podman, Charliecloud, Nix; nothing
# mocked, nothing skipped: a test whose tool is missing fails and names
# what to install).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The macOS code (Seatbelt) type-checked for aarch64-apple-darwin; installs
# the target's standard library when missing.
scripts/check-macos.sh
# The slurm run environment's tests use a real single-node Slurm.
scripts/slurm-up.sh
trap scripts/slurm-down.sh EXIT
mkdir -p target
log=target/test-output.txt
status=0
# The end-to-end tests (tests/, package vibesys-tests) run the vibesys
# binary at target/debug/vibesys, which `cargo test` does not build (it
# builds a package's bin only for that package's own integration tests):
# build every binary first, so the tests run the binary of this checkout.
cargo build --workspace --bins
# The images the Docker Engine holds before the suite must all be there,
# under the same tags, after it: tests load images under names of their own
# or put back what they replaced (scripts/engine-images.sh).
images_before=target/engine-images-before.txt
scripts/engine-images.sh snapshot "$images_before"
cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
images_status=0
scripts/engine-images.sh compare "$images_before" || images_status=$?
[ "$images_status" -eq 0 ] || status=$images_status
# One closing line for the whole suite (cargo's last line is a crate's
# doc-tests, often "0 passed"): the sums over every test binary.
# Every fuzz target builds and runs on its seed corpus for a short smoke
# period: a target that stops building or crashes fails CI (long runs:
# scripts/fuzz.sh 600; docs/fuzzing.md).
fuzz_status=0
FUZZ_JOBS=2 scripts/fuzz.sh "${VIBESYS_FUZZ_SECONDS:-10}" || fuzz_status=$?
[ "$fuzz_status" -eq 0 ] || { echo "fuzz smoke run failed" >&2; status=$fuzz_status; }
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
