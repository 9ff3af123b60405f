#!/usr/bin/env bash
# Runs the Python package's checks ON A GPU MACHINE with PyTorch and CuPy, from the repository
# root, over a build directory built elsewhere (scripts/build-gpu.sh) and carried here: the
# package as CMake copied it into $BUILD_DIR/python, with that tree's libraries. No compiler,
# no network.
#
#   bash scripts/python-gpu-check.sh [--no-bench]
#
#   OUT        where logs, JSON and tables go (default ./python-gpu-out)
#   BUILD_DIR  the carried build directory (default build/gpu)
#
# Steps (each logged to $OUT/<step>.log; every step runs even if an earlier one failed):
#   1 environment  python3, torch, cupy: versions and devices
#   2 pytest       python/tests with the cuda backend: the cpu suite's tests on the GPU, soma as
#                  CuPy's allocator (values against CuPy's own, used memory back to 0, frees on
#                  the current stream), soma.torch.mem_pool() regions (a SKIP is a failure here)
#   3 cupy-bench   python/bench/cupy_bench.py: three CuPy workloads under MemoryPool,
#                  MemoryAsyncPool and soma, each in its own process ($OUT/cupy-bench.md)
# Exit status: 0 everything passed; 1 a test failed; 2 tests passed but the benchmark failed;
# 3 the setup is wrong.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 3
# shellcheck source=scripts/lib/check-output.sh
source scripts/lib/check-output.sh  # the repository root is the working directory
check_start python-gpu-check ./python-gpu-out 11 "--no-bench" "$@"

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SOMA_BACKEND=cuda SOMA_GPU_TESTS_REQUIRE_CUDA=1 PYTHONDONTWRITEBYTECODE=1
if [[ ! -f "$BUILD_DIR/python/soma/__init__.py" ]]; then
  record FAIL setup "no $BUILD_DIR/python/soma: configure and build $BUILD_DIR, then carry it"
  exit 3
fi
build_abs="$(cd "$BUILD_DIR" && pwd -P)"
export PYTHONPATH="$build_abs/python"
status=0

python3 - >"$OUT/environment.log" 2>&1 <<'PY'
import sys
print("python", sys.version.split()[0], sys.executable)
import torch, cupy, soma
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
print("cupy", cupy.__version__, "runtime", cupy.cuda.runtime.runtimeGetVersion())
print("soma", soma.__version__, soma.backend(), "devices", soma.device_count(), soma.library_path())
PY
if [[ $? -eq 0 ]]; then record INFO environment "$(tr '\n' ';' <"$OUT/environment.log")"
else record FAIL environment "see environment.log"; exit 3; fi

SOMA_TEST_OUT="$OUT" timeout 400 python3 -m pytest -p no:cacheprovider -rs -v python/tests \
  >"$OUT/pytest.log" 2>&1
code=$?
line="$(grep -E '^=+ .* in [0-9.]+s' "$OUT/pytest.log" | tail -1)"
if [[ $code -eq 0 ]] && ! grep -q "SKIPPED" "$OUT/pytest.log"; then record PASS pytest "$line"
else record FAIL pytest "exit $code: $line (a SKIP is a failure on a GPU machine)"; status=1; fi

if ((run_bench)); then
  if timeout 400 python3 python/bench/cupy_bench.py --out "$OUT" >"$OUT/cupy-bench.log" 2>&1; then
    record PASS cupy-bench "$OUT/cupy-bench.md"
  else
    record FAIL cupy-bench "see cupy-bench.log"; ((status == 0)) && status=2
  fi
  cat "$OUT/cupy-bench.md" >>"$summary" 2>/dev/null
fi
exit "$status"
