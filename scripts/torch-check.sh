#!/usr/bin/env bash
# Runs soma's PyTorch checks ON A GPU MACHINE with PyTorch installed, from the repository root,
# over a build directory built elsewhere with scripts/build-gpu.sh and carried here (build/gpu:
# it holds integrations/torch/libsoma_torch.so and its test). Needs the NVIDIA driver and
# python3 with torch (CUDA build); no compiler, no network.
#
#   bash scripts/torch-check.sh [--quick] [--no-bench]
#
#   OUT        where logs, JSON and the table go (default ./torch-out)
#   BUILD_DIR  the carried build directory (default build/gpu)
#
# Steps (each logged to $OUT/<step>.log; every step runs even if an earlier one failed):
#   1 environment  nvidia-smi, python3, torch (version, CUDA, device), what libsoma_torch.so
#                  links (ldd)
#   2 shim         integrations/torch/tests/soma_torch_shim_test with SOMA_BACKEND=cuda: the
#                  library's C functions on real CUDA streams (stream 0 adopted as the legacy
#                  stream, record_stream ordering, threads)
#   3 python       integrations/torch/tests/test_soma_torch.py: soma as PyTorch's allocator,
#                  training steps of torch.nn models checked against the CPU, record_stream,
#                  soma's used memory back to 0 (a SKIP here is a failure: this is a GPU machine)
#   4 bench        integrations/torch/bench/train_bench.py: four workloads (the transformer
#                  training loop with fixed and variable shapes, an inference loop of changing
#                  batch and length, a convolutional network) under PyTorch's native allocator,
#                  expandable segments, the cudaMallocAsync backend and soma (its defaults:
#                  remapping before growth), each in its own process, every timed shape warmed
#                  up first; TORCH_BENCH_WORKLOADS and TORCH_BENCH_ALLOCATORS (comma-separated)
#                  pick others, TORCH_BENCH_ROUNDS=N runs each N times, interleaved (the best
#                  step time and the worst memory ratio count); TORCH_BENCH_LIBRARY_B=PATH, a
#                  second build's libsoma_torch.so, runs the allocators named <soma's>@b with it
#                  (e.g. TORCH_BENCH_ALLOCATORS=expandable,soma,soma@b: an A/B of two builds).
#                  Writes $OUT/torch-bench.json,
#                  $OUT/torch-bench.md (the table for docs/benchmarks.md) and
#                  $OUT/bench-<allocator>-<workload>.log. --quick: about 5 minutes a round on
#                  one H200; without it, pick two workloads to stay within a 10-minute command.
# $OUT/summary.txt gathers the verdicts and the table.
#
# Exit status: 0 everything passed; 1 a test failed; 2 tests passed but a benchmark run
# failed; 3 the setup is wrong (no build directory, no library, no PyTorch).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
# shellcheck source=scripts/lib/check-output.sh
source scripts/lib/check-output.sh  # the repository root is the working directory
check_start torch-check ./torch-out 10 "--quick --no-bench" "$@"

# NVLink multicast stays off: the lent machines do not support changing it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SOMA_BACKEND=cuda
export SOMA_GPU_TESTS_REQUIRE_CUDA=1

# ---- 1 environment ----------------------------------------------------------------------------
if [[ ! -d "$BUILD_DIR" ]]; then
  record FAIL setup "no $BUILD_DIR: build it with scripts/build-gpu.sh and carry it here"
  exit 3
fi
build_abs="$(cd "$BUILD_DIR" && pwd -P)"
library="$build_abs/integrations/torch/libsoma_torch.so"
shim_test="$build_abs/integrations/torch/tests/soma_torch_shim_test"
if [[ ! -f "$library" ]]; then
  record FAIL setup "no $library (is 'add_subdirectory(integrations)' in CMakeLists.txt?)"
  exit 3
fi
# Run paths point at libsoma through $ORIGIN; this is a second way to it.
export LD_LIBRARY_PATH="$build_abs/src/capi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# (runtime-libs, where this machine's libstdc++ is too old, serves python3 too: it must load
# that copy before torch loads the system's)
check_libraries "$build_abs" "$library" "$shim_test"

{
  echo "== nvidia-smi"
  nvidia-smi 2>&1 || echo "(nvidia-smi failed: $?)"
  echo
  echo "== python3 and torch"
  command -v python3
  python3 --version 2>&1
  python3 - <<'PY' 2>&1
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("device 0", torch.cuda.get_device_name(0))
PY
  echo
  echo "== environment"
  env | grep -E '^(CUDA_VISIBLE_DEVICES|LD_LIBRARY_PATH|PYTORCH_|SOMA_|NCCL_NVLS|TORCH_SYMM|NVSHMEM)' | sort
} >"$OUT/environment.log" 2>&1
torch_line="$(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available" if torch.cuda.is_available() else "NO DEVICE")' 2>/dev/null)"
if [[ -z "$torch_line" ]]; then
  record FAIL setup "python3 cannot import torch (see $OUT/environment.log)"
  exit 3
fi
record INFO torch "$torch_line"
gpu_line="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
record INFO gpu "${gpu_line:-nvidia-smi sees no GPU}"

test_failures=0
bench_failures=0

# ---- 2 shim -----------------------------------------------------------------------------------
if [[ -x "$shim_test" ]]; then
  say "shim test on cuda"
  log="$OUT/shim.log"
  (cd "$(dirname "$shim_test")" && timeout 300 "$shim_test" --gtest_output="xml:$OUT/shim.xml") \
    >"$log" 2>&1
  status=$?
  counts="$(gtest_counts "$log")"
  if ((status == 0)) && grep -q '^\[  PASSED  \] [0-9]* tests\?\.' "$log"; then
    record PASS shim "$counts (skips: tests that need 2 devices)"
  else
    record FAIL shim "exit $status: $counts (see $log)"
    grep -E '^\[  FAILED  \] [^ ]+$' "$log" | sort -u | head -20 | tee -a "$summary"
    test_failures=$((test_failures + 1))
  fi
else
  record FAIL shim "no $shim_test (built without tests?)"
  test_failures=$((test_failures + 1))
fi

# ---- 3 python ---------------------------------------------------------------------------------
say "python test (soma as PyTorch's allocator)"
log="$OUT/python.log"
timeout 300 python3 integrations/torch/tests/test_soma_torch.py --library "$library" >"$log" 2>&1
status=$?
line="$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)"
if ((status == 0)); then
  record PASS python "$line"
elif ((status == 77)); then
  record FAIL python "skipped on a GPU machine: $(tail -1 "$log")"
  test_failures=$((test_failures + 1))
else
  record FAIL python "exit $status: ${line:-no summary} (see $log)"
  grep -E '^FAIL ' "$log" | head -10 | tee -a "$summary"
  test_failures=$((test_failures + 1))
fi
grep -E '^(PASS|soma_torch:) ' "$log" >>"$summary"

# ---- 4 bench ----------------------------------------------------------------------------------
if ((run_bench == 0)); then
  record SKIP bench "--no-bench"
else
  bench_args=(--library "$library" --out "$OUT")
  [[ -n "${TORCH_BENCH_WORKLOADS:-}" ]] && bench_args+=(--workloads "$TORCH_BENCH_WORKLOADS")
  [[ -n "${TORCH_BENCH_ALLOCATORS:-}" ]] && bench_args+=(--allocators "$TORCH_BENCH_ALLOCATORS")
  [[ -n "${TORCH_BENCH_LIBRARY_B:-}" ]] && bench_args+=(--library-b "$TORCH_BENCH_LIBRARY_B")
  rounds="${TORCH_BENCH_ROUNDS:-1}"
  bench_args+=(--rounds "$rounds")
  say "benchmark: train_bench.py ${bench_args[*]:2}"
  ((quick == 1)) && bench_args+=(--quick)
  timeout $((540 * rounds)) python3 integrations/torch/bench/train_bench.py "${bench_args[@]}" \
    >"$OUT/bench.log" 2>&1
  status=$?
  if ((status == 0)); then
    record PASS bench "$OUT/torch-bench.md, $OUT/torch-bench.json"
  else
    record FAIL bench "exit $status (see $OUT/bench.log)"
    grep -E 'FAILED' "$OUT/bench.log" | head -10 | tee -a "$summary"
    bench_failures=$((bench_failures + 1))
  fi
  if [[ -f "$OUT/torch-bench.md" ]]; then
    { echo; cat "$OUT/torch-bench.md"; } | tee -a "$summary"
  fi
fi

echo | tee -a "$summary"
if ((test_failures > 0)); then
  say "FAILED: $test_failures test step(s); see $summary"
  exit 1
elif ((bench_failures > 0)); then
  say "tests passed; the benchmark failed; see $summary"
  exit 2
fi
say "all passed; see $summary"
exit 0
