#!/usr/bin/env bash
# Runs every fuzz target for a bounded time from the committed corpus and
# regressions, on the stable toolchain (no sanitizers). Any crash fails the
# run; libFuzzer leaves the failing input under fuzz/artifacts/<target>/.
#   FUZZ_SECONDS  time per target (default 30)
set -euo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-30}"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
cargo fuzz build --sanitizer none --debug-assertions

for target in $(cargo fuzz list); do
  # New inputs go to a scratch directory; the committed ones are only read.
  scratch="$(mktemp -d)"
  dirs=("$scratch" "corpus/$target")
  [ -d "regressions/$target" ] && dirs+=("regressions/$target")
  echo "fuzz: $target for ${seconds} s"
  log="$scratch.log"
  status=0
  cargo fuzz run "$target" "${dirs[@]}" --sanitizer none --debug-assertions -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 40 "$log" >&2
    echo "FATAL: fuzz target $target failed (exit $status); the input is under fuzz/artifacts/$target/" >&2
    exit 1
  fi
  rm -f "$log"
  rm -rf "$scratch"
done
echo "fuzz: every target ran ${seconds} s clean"
