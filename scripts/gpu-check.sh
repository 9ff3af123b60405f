#!/usr/bin/env bash
# Runs soma's GPU checks ON A GPU MACHINE, from the repository root, over a build directory that
# was built elsewhere with scripts/build-gpu.sh and carried here (build/gpu). Needs the NVIDIA
# driver, CMake's ctest and (for step 4) compute-sanitizer; no compiler, no GoogleTest.
#
#   bash scripts/gpu-check.sh [--quick] [--no-sanitizer] [--no-bench]
#
#   OUT        where logs and the summary go (default ./gpu-out)
#   BUILD_DIR  the carried build directory (default build/gpu)
#
# Steps (each logged to $OUT/<step>.log; every step runs even if an earlier one failed):
#   1 environment   nvidia-smi, driver, ctest, compute-sanitizer; what the programs link (ldd)
#   2 ctest         ctest -L gpu in the build directory: the conformance suites on cuda (tests
#                   named cuda.*, 8 at a time) and then the GPU tests one at a time (they compare
#                   the device-wide cuMemGetInfo). CTest files hold the absolute paths of
#                   the machine that built them (e.g. /work/main/build/gpu); where that path does
#                   not exist here it is made a symbolic link to this build directory for the
#                   run (and removed afterwards). Where it exists and is something else, ctest is
#                   skipped and step 3 decides alone.
#   3 direct        every GPU test program (tests/gpu/gpu_*_test, tests/*/*_gpu_test) and every
#                   conformance program (capi, cxx, model, reuse, ipc) with SOMA_BACKEND=cuda, run
#                   whole, all its tests in one process
#   4 sanitizer     the same under compute-sanitizer --tool memcheck
#                   --track-stream-ordered-races all: must report 0 errors
#   5 bench         bench/vs_driver (soma vs cudaMallocAsync vs cudaMalloc), bench/graph_vs_driver
#                   (soma's graph memory nodes vs the driver's), and
#                   bench/alloc_pairs_bench with SOMA_BACKEND=cpu (and, for information only, cuda),
#                   and bench/thread_scaling on cuda (soma's threads beside the host's own scaling),
#                   and bench/vmm_costs (the driver's VMM calls; for information)
# The conformance suites run here on cuda (CI runs them on cpu); tests that hold on the cpu
# backend only report SKIPPED with their reason. GPU tests run with SOMA_BACKEND=cuda and SOMA_GPU_TESTS_REQUIRE_CUDA=1, so a
# test that cannot reach the cuda backend FAILS instead of skipping.
#
# Exit status: 0 everything passed; 1 a test or sanitizer step failed; 2 tests passed but a
# benchmark failed; 3 the setup is wrong (no build directory, a library missing).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
# shellcheck source=scripts/lib/check-output.sh
source scripts/lib/check-output.sh  # the repository root is the working directory
check_start gpu-check ./gpu-out 28 "--quick --no-sanitizer --no-bench" "$@"

test_failures=0
bench_failures=0
created_link=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [[ -n "$created_link" && -L "$created_link" ]]; then rm -f "$created_link"; fi
}
trap cleanup EXIT

# ---- 1 environment ----------------------------------------------------------------------------
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  record FAIL setup "no $BUILD_DIR/CMakeCache.txt: build it with scripts/build-gpu.sh and carry $BUILD_DIR"
  exit 3
fi
build_abs="$(cd "$BUILD_DIR" && pwd -P)"
gpu_tests=()
# tests/gpu/ (nvcc-compiled, this script's own) and the other GPU test programs (*_gpu_test,
# e.g. tests/backend/cuda_backend_gpu_test).
for test in "$build_abs"/tests/gpu/gpu_*_test "$build_abs"/tests/*/*_gpu_test; do
  [[ -x "$test" ]] && gpu_tests+=("$test")
done
conformance_tests=()
for test in "$build_abs"/tests/capi/capi_*_test "$build_abs"/tests/cxx/cxx_api_test \
  "$build_abs"/tests/model/model_test "$build_abs"/tests/reuse/reuse_*_test \
  "$build_abs"/tests/ipc/ipc_*_test; do
  [[ -x "$test" ]] && conformance_tests+=("$test")
done
if ((${#gpu_tests[@]} == 0)); then
  record FAIL setup "no GPU test programs in $BUILD_DIR/tests/gpu (was it built with scripts/build-gpu.sh?)"
  exit 3
fi
# Run paths point at the build directory through $ORIGIN; this is a second way to libsoma.
export LD_LIBRARY_PATH="$build_abs/src/capi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

sanitizer=""
for candidate in "$(command -v compute-sanitizer 2>/dev/null)" \
  /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  if [[ -n "$candidate" && -x "$candidate" ]]; then
    sanitizer="$candidate"
    break
  fi
done

{
  echo "== nvidia-smi"
  nvidia-smi 2>&1 || echo "(nvidia-smi failed: $?)"
  echo
  echo "== nvidia-smi --query-gpu"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,compute_mode \
    --format=csv 2>&1 || true
  echo
  echo "== /proc/driver/nvidia/version"
  cat /proc/driver/nvidia/version 2>&1 || true
  echo
  echo "== tools"
  echo "ctest: $(ctest --version 2>&1 | head -1)"
  echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
  echo "compute-sanitizer: ${sanitizer:-not found} $([[ -n "$sanitizer" ]] && "$sanitizer" --version 2>&1 | tail -1)"
  echo "uname: $(uname -a)"
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"
} >"$OUT/environment.log" 2>&1
gpu_line="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
if [[ -n "$gpu_line" ]]; then
  record INFO gpu "$gpu_line ($(nvidia-smi -L 2>/dev/null | wc -l) visible)"
else
  record FAIL gpu "nvidia-smi sees no GPU (see $OUT/environment.log); the GPU tests will fail"
fi
check_libraries "$build_abs" "${gpu_tests[@]}" "$build_abs/bench/vs_driver" \
  "$build_abs/bench/alloc_pairs_bench"

export SOMA_BACKEND=cuda
export SOMA_GPU_TESTS_REQUIRE_CUDA=1
# NVLink multicast (NVLS) stays off: the lent machines do not support changing it.
export NCCL_NVLS_ENABLE=0
# NCCL for the two-GPU test (loaded at run time): on the library path, or the copy a Python
# package (PyTorch's nvidia-nccl) brought along.
if [[ -z "${SOMA_NCCL_LIBRARY:-}" ]]; then
  SOMA_NCCL_LIBRARY="$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')"
  if [[ -z "$SOMA_NCCL_LIBRARY" ]] && command -v python3 >/dev/null; then
    SOMA_NCCL_LIBRARY="$(python3 -c 'import nvidia.nccl, os; d = os.path.dirname(nvidia.nccl.__file__ or list(nvidia.nccl.__path__)[0]); print(os.path.join(d, "lib", "libnccl.so.2"))' 2>/dev/null || true)"
  fi
  [[ -n "$SOMA_NCCL_LIBRARY" && -e "$SOMA_NCCL_LIBRARY" ]] || SOMA_NCCL_LIBRARY=""
fi
export SOMA_NCCL_LIBRARY
record INFO nccl "${SOMA_NCCL_LIBRARY:-not found (the NCCL test skips)}"

# ---- 2 ctest ----------------------------------------------------------------------------------
say "ctest -L gpu"
built_at="$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt")"
ctest_dir=""
if [[ -z "$built_at" ]]; then
  record SKIP ctest "CMakeCache.txt names no build directory"
elif [[ -d "$built_at" && "$(cd "$built_at" && pwd -P)" == "$build_abs" ]]; then
  ctest_dir="$built_at"
elif [[ -e "$built_at" || -L "$built_at" ]]; then
  record SKIP ctest "the build's original path $built_at exists here and is another directory"
elif mkdir -p "$(dirname "$built_at")" 2>/dev/null && ln -s "$build_abs" "$built_at" 2>/dev/null; then
  created_link="$built_at"
  ctest_dir="$built_at"
  say "made $built_at a link to $build_abs for ctest (removed at exit)"
else
  record SKIP ctest "cannot create $built_at -> $build_abs (permissions?)"
fi
if [[ -n "$ctest_dir" ]]; then
  ctest_log="$OUT/ctest.log"
  junit_option=0
  ctest --help 2>/dev/null | grep -q -- '--output-junit' && junit_option=1
  junit() { ((junit_option)) && echo "--output-junit $OUT/$1"; }
  # The conformance tests compare this process's commits only: 8 at a time. The GPU tests
  # compare the device-wide cuMemGetInfo: one at a time.
  # shellcheck disable=SC2046 # junit's words are meant to split
  (cd "$ctest_dir" && ctest -L gpu -R '^cuda[.]' -j 8 --output-on-failure --timeout 300 \
    $(junit ctest-conformance-junit.xml)) >"$ctest_log" 2>&1
  status=$?
  # shellcheck disable=SC2046
  (cd "$ctest_dir" && ctest -L gpu -E '^cuda[.]' --output-on-failure --timeout 300 \
    $(junit ctest-gpu-junit.xml)) >>"$ctest_log" 2>&1
  status=$((status | $?))
  # ctest 3.25 says "100% tests passed, 0 tests failed out of N"; newer ones drop the middle.
  line="$(grep -E '[0-9]+% tests passed(, [0-9]+ tests? failed)? out of' "$ctest_log" |
    paste -sd ';' -)"
  skipped="$(grep -cE '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$ctest_log" || true)"
  if ((status == 0)) && [[ -n "$line" ]]; then
    record PASS ctest "conformance; gpu: $line; $skipped skipped"
  else
    record FAIL ctest "exit $status: ${line:-no summary line}; $skipped skipped (see $ctest_log)"
    grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Not Run|Exception)' \
      "$ctest_log" | head -40 | tee -a "$summary"
    test_failures=$((test_failures + 1))
  fi
fi

# ---- 3 direct ---------------------------------------------------------------------------------
for test in "${gpu_tests[@]}" "${conformance_tests[@]}"; do
  name="$(basename "$test")"
  say "direct: $name"
  log="$OUT/direct-$name.log"
  (cd "$(dirname "$test")" && timeout 300 "$test" --gtest_output="xml:$OUT/direct-$name.xml") \
    >"$log" 2>&1
  status=$?
  counts="$(gtest_counts "$log")"
  if ((status == 0)) && [[ "$counts" == *", 0 skipped" ]]; then
    record PASS "direct $name" "$counts"
  elif ((status == 0)); then
    record WARN "direct $name" "$counts: a test skipped on a GPU machine (see $log)"
    grep -A1 -E ': Skipped$' "$log" | grep -vE '^(--|.*: Skipped)$' | sort | uniq -c | head -5 |
      tee -a "$summary"
  else
    record FAIL "direct $name" "exit $status: $counts (see $log)"
    grep -E '^\[  FAILED  \] [^ ]+$' "$log" | sort -u | head -20 | tee -a "$summary"
    test_failures=$((test_failures + 1))
  fi
done

# ---- 4 sanitizer ------------------------------------------------------------------------------
if ((run_sanitizer == 0)); then
  record SKIP sanitizer "--no-sanitizer"
elif [[ -z "$sanitizer" ]]; then
  record FAIL sanitizer "compute-sanitizer not found (PATH, /usr/local/cuda/bin)"
  test_failures=$((test_failures + 1))
else
  for test in "${gpu_tests[@]}"; do
    name="$(basename "$test")"
    say "compute-sanitizer memcheck: $name"
    log="$OUT/sanitizer-$name.log"
    # compute-sanitizer allocates device memory of its own: cudaMemGetInfo comparisons get
    # more slack.
    # Left out here, run plainly in step 3: the test that drives cuMemCreate into out-of-memory
    # on purpose, and the NCCL all-reduce, whose library enables peer access itself and then
    # meets cudaErrorPeerAccessAlreadyEnabled in its own cudaGetLastError: the sanitizer counts
    # every failed API call as an error, these are expected ones and none is soma's. And the
    # test whose child process faults on purpose (a kernel on a host pool never granted).
    (cd "$(dirname "$test")" && SOMA_GPU_TESTS_MEMINFO_SLACK_MIB=1024 timeout 500 \
      "$sanitizer" --tool memcheck --track-stream-ordered-races all --error-exitcode 86 \
      --print-limit 200 "$test" --gtest_filter='-cuda_gpu.OutOfMemoryIsReportedAtCreation:S6_GpuPeerAccess.NcclAllReduceOverBuffersFromSomaPools:S5_GpuHostPools.AKernelWithoutTheGrantFaults' \
      --gtest_output="xml:$OUT/sanitizer-$name.xml") >"$log" 2>&1
    status=$?
    errors="$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -1)"
    if ((status == 0)) && [[ "$errors" == 0 ]]; then
      record PASS "sanitizer $name" "0 errors; $(gtest_counts "$log")"
    else
      record FAIL "sanitizer $name" \
        "exit $status, ${errors:-no} error summary; $(gtest_counts "$log") (see $log)"
      grep -E '^========= (Invalid|Program hit|Race|Uninitialized|Leaked|Error)' "$log" |
        sort | uniq -c | sort -rn | head -10 | tee -a "$summary"
      grep -E '^\[  FAILED  \] [^ ]+$' "$log" | sort -u | head -10 | tee -a "$summary"
      test_failures=$((test_failures + 1))
    fi
  done
fi

# ---- 5 bench ----------------------------------------------------------------------------------
bench_args=()
((quick == 1)) && bench_args=(--quick)
run_bench_program() { # run_bench_program <step> <counts: yes|info> <backend> <program>
  local step="$1" counts="$2" backend="$3" program="$4" log="$OUT/$1.txt" status
  say "bench: $step"
  SOMA_BACKEND="$backend" timeout 300 "$program" "${bench_args[@]}" >"$log" 2>&1
  status=$?
  if ((status == 0)); then
    record PASS "$step" "$log"
  elif [[ "$counts" == yes ]]; then
    record FAIL "$step" "exit $status (see $log): $(tail -1 "$log")"
    bench_failures=$((bench_failures + 1))
  else
    record INFO "$step" "exit $status, for information only (see $log): $(tail -1 "$log")"
  fi
}
if ((run_bench == 0)); then
  record SKIP bench "--no-bench"
else
  run_bench_program vs_driver yes cuda "$build_abs/bench/vs_driver"
  run_bench_program graph_vs_driver yes cuda "$build_abs/bench/graph_vs_driver"
  run_bench_program alloc_pairs_bench-cpu yes cpu "$build_abs/bench/alloc_pairs_bench"
  run_bench_program alloc_pairs_bench-cuda info cuda "$build_abs/bench/alloc_pairs_bench"
  run_bench_program thread_scaling-cuda info cuda "$build_abs/bench/thread_scaling"
  if [[ -x "$build_abs/bench/vmm_costs" ]]; then
    run_bench_program vmm_costs info cuda "$build_abs/bench/vmm_costs"
  fi
fi

# ---- summary ----------------------------------------------------------------------------------
{
  if [[ -s "$OUT/vs_driver.txt" ]]; then
    echo
    echo "== bench/vs_driver"
    cat "$OUT/vs_driver.txt"
  fi
  if [[ -s "$OUT/graph_vs_driver.txt" ]]; then
    echo
    echo "== bench/graph_vs_driver"
    cat "$OUT/graph_vs_driver.txt"
  fi
  if [[ -s "$OUT/vmm_costs.txt" ]]; then
    echo
    echo "== bench/vmm_costs"
    cat "$OUT/vmm_costs.txt"
  fi
  if [[ -s "$OUT/alloc_pairs_bench-cpu.txt" ]]; then
    echo
    echo "== bench/alloc_pairs_bench (SOMA_BACKEND=cpu)"
    cat "$OUT/alloc_pairs_bench-cpu.txt"
  fi
  echo
  if ((test_failures != 0)); then
    echo "RESULT: FAILED ($test_failures test/sanitizer step(s) failed)"
  elif ((bench_failures != 0)); then
    echo "RESULT: tests passed, $bench_failures benchmark(s) FAILED"
  else
    echo "RESULT: passed"
  fi
  echo "logs: $OUT; took ${SECONDS}s"
} >>"$summary"
echo
echo "=================================================================================="
cat "$summary"
echo "=================================================================================="
if ((test_failures != 0)); then exit 1; fi
if ((bench_failures != 0)); then exit 2; fi
exit 0
