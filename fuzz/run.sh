#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (default 30), one after another, starting
# from its seeds in corpus/<target>/; fails on the first crash, panic, leak, timeout or
# out-of-memory (libFuzzer keeps the input in artifacts/<target>/). Prints one line per target
# with its executions. Needs the nightly toolchain and cargo-fuzz (fuzz/README.md).
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# CARGO_FUZZ_TARGET_DIR: where the build goes (default fuzz/target).
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^idemproxy-fuzz$')
fi
build=(--debug-assertions)
if [ -n "${CARGO_FUZZ_TARGET_DIR:-}" ]; then
  build+=(--target-dir "$CARGO_FUZZ_TARGET_DIR")
fi
cargo +nightly fuzz build "${build[@]}"

# The fuzzer adds what it finds to a scratch copy: the committed seeds stay as they are.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=0
for target in "${targets[@]}"; do
  mkdir -p "$work/$target" "artifacts/$target"
  log="$work/$target.log"
  if cargo +nightly fuzz run "${build[@]}" "$target" "$work/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 >"$log" 2>&1; then
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    echo "fuzz: $target: ${runs:-?} executions in ${seconds} s, no crash"
  else
    failed=$((failed + 1))
    echo "fuzz: $target: FAILED; the last lines of its log:" >&2
    tail -40 "$log" >&2
  fi
done
echo "fuzz: $(( ${#targets[@]} - failed )) passed, $failed failed"
[ "$failed" -eq 0 ]
