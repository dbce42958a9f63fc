#!/usr/bin/env bash
# Build the static (musl) vibesys host binary and print its path.
#
# Usage: scripts/build-static.sh [--profile PROFILE] [--target TRIPLE] [--beside DIR]
#
#   --profile   cargo profile, default `release`
#   --target    musl target triple, default `x86_64-unknown-linux-musl`
#   --beside    also copy it to DIR/vibesys-static, where a dynamically
#               linked vibesys in DIR finds its command server (the slurm
#               run environment needs one), e.g. --beside target/release
#
# The target directory is $CARGO_TARGET_DIR (default: <repo>/target). The
# binary lands in $CARGO_TARGET_DIR/<target>/<profile>/vibesys; the script
# prints that path as the only line on stdout (progress goes to stderr), so
# `bin=$(scripts/build-static.sh)` works. It fails, saying why, when the
# musl target cannot be installed or the result is not a static executable.
set -euo pipefail

profile=release
target=x86_64-unknown-linux-musl
beside=
while [ $# -gt 0 ]; do
    case "$1" in
    --profile) profile=${2:?--profile needs a value}; shift 2 ;;
    --target) target=${2:?--target needs a value}; shift 2 ;;
    --beside) beside=${2:?--beside needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-static.sh: error: unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$target" in
*-linux-musl*) ;;
*) echo "build-static.sh: error: target $target is not a musl target; a static binary needs one" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$repo/target}

command -v cargo >/dev/null 2>&1 || {
    echo "build-static.sh: error: cargo not found: install Rust (https://rustup.rs)" >&2
    exit 1
}

# The musl target's standard library must be installed. With rustup we can
# add it; without rustup (a distribution's Rust) we can only check.
if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed | grep -x "$target" >/dev/null; then
        echo "build-static.sh: installing the Rust target $target (rustup target add)" >&2
        if ! rustup target add "$target" >&2; then
            echo "build-static.sh: error: cannot install the Rust target $target with rustup" \
                "(offline? run \`rustup target add $target\` where the network is reachable)" >&2
            exit 1
        fi
    fi
else
    sysroot=$(rustc --print sysroot)
    if [ ! -d "$sysroot/lib/rustlib/$target" ]; then
        echo "build-static.sh: error: the Rust target $target is not installed and rustup is" \
            "not available to add it; install rustup (https://rustup.rs) or your" \
            "distribution's musl standard library for Rust" >&2
        exit 1
    fi
fi

# C code built by build scripts (the cc crate: zstd-sys, ...) needs a C
# compiler for musl; a glibc gcc would link glibc-only symbols. The cc crate
# looks for <arch>-linux-musl-gcc (Debian's musl-tools installs it).
cc_var="CC_$(echo "$target" | tr '-' '_')"
musl_cc="${target%%-*}-linux-musl-gcc"
if [ -z "${!cc_var:-}" ] && grep -q '^name = "cc"$' "$repo/Cargo.lock" 2>/dev/null; then
    if command -v "$musl_cc" >/dev/null 2>&1; then
        :
    elif command -v musl-gcc >/dev/null 2>&1 && [ "${target%%-*}" = "$(uname -m)" ]; then
        export "$cc_var=musl-gcc"
    else
        echo "build-static.sh: error: no C compiler for $target ($musl_cc or musl-gcc) to build" \
            "the C code of dependencies; install musl-tools (Debian/Ubuntu:" \
            "\`apt-get install musl-tools\`) or set $cc_var" >&2
        exit 1
    fi
fi

echo "build-static.sh: cargo build --profile $profile --target $target -p vibesys (target dir $target_dir)" >&2
CARGO_TARGET_DIR=$target_dir cargo build --profile "$profile" --target "$target" -p vibesys >&2

# cargo puts the `dev` profile in a directory named `debug`.
profile_dir=$profile
[ "$profile" = dev ] && profile_dir=debug
bin=$target_dir/$target/$profile_dir/vibesys
if [ ! -x "$bin" ]; then
    echo "build-static.sh: error: cargo finished but $bin is missing" >&2
    exit 1
fi

# A static executable has no PT_INTERP (no dynamic loader) and needs no
# shared library (no NEEDED entry). readelf decides; without it, `file`
# ("statically linked", or "static-pie linked" since file 5.40).
if command -v readelf >/dev/null 2>&1; then
    if readelf -lW "$bin" | grep 'INTERP' >/dev/null || readelf -dW "$bin" | grep '(NEEDED)' >/dev/null; then
        echo "build-static.sh: error: $bin is not static: it has a dynamic loader or needs shared libraries" >&2
        exit 1
    fi
elif command -v file >/dev/null 2>&1; then
    desc=$(file -b "$bin")
    case "$desc" in
    *statically\ linked* | *static-pie\ linked*) ;;
    *) echo "build-static.sh: error: $bin is not static: $desc" >&2; exit 1 ;;
    esac
else
    echo "build-static.sh: warning: neither readelf nor file found; not checking that $bin is static" >&2
fi

if [ -n "$beside" ]; then
    [ -d "$beside" ] || { echo "build-static.sh: error: --beside $beside: no such directory" >&2; exit 1; }
    # Copied, then renamed into place: a vibesys reading it never sees half a file.
    cp "$bin" "$beside/.vibesys-static.tmp.$$"
    mv -f "$beside/.vibesys-static.tmp.$$" "$beside/vibesys-static"
    echo "build-static.sh: copied to $beside/vibesys-static" >&2
fi
echo "$bin"
