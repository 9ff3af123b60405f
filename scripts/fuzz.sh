#!/usr/bin/env bash
# Builds the `fuzz` preset (clang, libFuzzer, ASan + UBSan) and runs the fuzz targets of
# tests/fuzz/ side by side, each for a bounded time over a copy of its seed corpus and its
# regressions; new inputs go to a temporary folder, never into the repository. A finding (crash,
# leak, timeout) leaves the input in build/fuzz-findings/<target>/ and makes the script fail.
#
#   scripts/fuzz.sh                 # 60 s per target
#   scripts/fuzz.sh 600             # 10 minutes per target
#   scripts/fuzz.sh 60 -jobs=2 -workers=2   # extra arguments go to every libFuzzer run
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds="${1:-60}"
shift || true
targets=(api_ops_fuzz threads_fuzz)

scripts/setup-deps.sh
cmake --preset fuzz
cmake --build --preset fuzz

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
findings="build/fuzz-findings"

# Leaks are checked once, when each run exits (LeakSanitizer; off where the caller turned it
# off, as .ci/run does where it cannot run). libFuzzer's check after every input
# (-detect_leaks=1) is off: a destroyed stream's worker thread frees its memory after
# somaStreamDestroy returned, so an input that destroys a stream rarely ends with as many
# frees as mallocs, and libFuzzer then scans the heap after nearly every input (a fifth of the
# speed) to find memory that is freed moments later.
leak_check=1
if [[ "${ASAN_OPTIONS:-}" == *detect_leaks=0* ]]; then
  leak_check=0
fi
export ASAN_OPTIONS="detect_leaks=${leak_check}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# The targets run side by side, each for the whole time (one core each on CI's two), and their
# output is shown one after the other.
fuzz_one() {
  local target="$1"
  shift
  local corpus="$work/$target/corpus"
  mkdir -p "$corpus" "$work/$target/artifacts"
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  local extra_dirs=()
  if [[ -d tests/fuzz/regressions/$target ]]; then
    extra_dirs+=("tests/fuzz/regressions/$target")
  fi
  echo "fuzz: $target for ${seconds}s"
  build/fuzz/tests/fuzz/"$target" -max_total_time="$seconds" -timeout=30 -max_len=1200 \
    -detect_leaks=0 -print_final_stats=1 \
    -artifact_prefix="$work/$target/artifacts/" "$@" "$corpus" "${extra_dirs[@]}"
}

pids=()
for target in "${targets[@]}"; do
  fuzz_one "$target" "$@" >"$work/$target.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  target="${targets[$i]}"
  target_status=0
  wait "${pids[$i]}" || target_status=$?
  cat "$work/$target.log"
  if ((target_status != 0)); then
    status=1
    mkdir -p "$findings/$target"
    cp "$work/$target/artifacts"/* "$findings/$target"/ 2>/dev/null || true
    echo "fuzz: $target FOUND SOMETHING (exit $target_status); inputs in $findings/$target/" >&2
  fi
done
exit "$status"
