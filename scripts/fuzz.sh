#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for SECONDS each (default 60)
# with libFuzzer, on the corpus in fuzz/corpus/<target>/ (seeds, committed)
# plus new inputs in fuzz/work/<target>/ (not committed).
#
#   scripts/fuzz.sh                 # every target, 60 s each
#   scripts/fuzz.sh 600 policy_config image_archive_tar
#   FUZZ_JOBS=2 scripts/fuzz.sh 600 # two targets at a time
#
# Needs the nightly toolchain (rustup toolchain install nightly); cargo-fuzz
# is not needed: the sanitizer-coverage flags it would pass are set here, so
# CI builds the same binaries without installing it. Exit status: non-zero
# when a target fails to build or libFuzzer reports a crash (the input is
# left in fuzz/artifacts/<target>/).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: the nightly toolchain is missing (libFuzzer's coverage flags need it): rustup toolchain install nightly" >&2
  exit 2
fi
triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/target}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^vibesys-fuzz$')
fi
echo "fuzz: building ${#targets[@]} targets (nightly, sanitizer coverage)" >&2
cargo +nightly build --release --target "$triple" $(printf -- '--bin %s ' "${targets[@]}")
bin=$CARGO_TARGET_DIR/$triple/release
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
run_one() {
  local t=$1 log
  mkdir -p "corpus/$t" "work/$t" "artifacts/$t"
  log=work/$t.log
  local dict=()
  [ -f "dict/$t.dict" ] && dict=(-dict="dict/$t.dict")
  if "$bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="artifacts/$t/" "${dict[@]}" \
      "work/$t" "corpus/$t" >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
  fi
  local execs edges
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-20s %-6s execs=%-10s edges=%s\n' "$t" "$status" "${execs:-?}" "${edges:-?}" | tee -a "$summary"
  [ "$status" = ok ] || { tail -40 "$log" >&2; return 1; }
}
failed=0
jobs=${FUZZ_JOBS:-1}
for t in "${targets[@]}"; do
  if [ "$jobs" -gt 1 ]; then
    run_one "$t" & 
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || failed=1; done
  else
    run_one "$t" || failed=1
  fi
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
echo "fuzz: summary (${secs}s per target)" >&2
sort "$summary" >&2
exit $failed
