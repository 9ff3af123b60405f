#!/usr/bin/env bash
# On a GPU machine, over a carried build/gpu (scripts/build-gpu.sh): runs every test of the C API,
# C++ API, model and reuse-policy suites one at a time with SOMA_BACKEND=cuda and writes
# PASS/FAIL/CRASH/SKIP per test to $OUT/conformance-cuda.txt (with the first failure message
# of each FAIL). Shows which of the cpu suites are backend-neutral.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../build/gpu" || exit 3
out="${OUT:-/tmp}/conformance-cuda.txt"
: >"$out"
for bin in tests/capi/capi_*_test tests/reuse/reuse_policies_test tests/cxx/cxx_api_test \
  tests/model/model_test tests/reuse/reuse_policy_model_test; do
  [ -x "$bin" ] || continue
  "$bin" --gtest_list_tests | awk '/^[^ ]/{suite=$1} /^  /{print suite $1}' | sed "s|^|$bin |"
done >/tmp/soma-tests.txt
wc -l /tmp/soma-tests.txt
run_one() {
  local bin="$1" name="$2" res rc
  res=$(SOMA_BACKEND=cuda SOMA_MODEL_STEPS=2000 timeout 60 "$bin" --gtest_filter="$name" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q "\[  PASSED  \] 1 test" <<<"$res"; then
    echo "PASS $bin $name"
  elif [ $rc -eq 0 ] && grep -q "SKIPPED" <<<"$res"; then
    echo "SKIP $bin $name"
  elif [ $rc -ge 124 ]; then
    echo "CRASH($rc) $bin $name"
  else
    echo "FAIL($rc) $bin $name :: $(grep -m1 -A2 'Failure' <<<"$res" | tr '\n' ' ' | cut -c1-300)"
  fi
}
export -f run_one
xargs -P 12 -L 1 bash -c 'run_one "$0" "$1"' </tmp/soma-tests.txt >>"$out"
awk '{print $1}' "$out" | sed 's/(.*//' | sort | uniq -c
