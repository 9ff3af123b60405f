#!/usr/bin/env bash
# Builds the `gpu` preset (Release, SOMA_ENABLE_CUDA=ON, build/gpu) on THIS machine, which needs
# the CUDA toolkit (nvcc) but no GPU. The result is meant to be carried to a GPU machine and run
# there with scripts/gpu-check.sh (the GPU machine has no GoogleTest, so tests are built here).
#
#   scripts/build-gpu.sh [--slim] [extra cmake configure arguments]
#
# --slim removes what the GPU machine never reads once the build is done: object files and static
# libraries (a later build then compiles everything again) and the programs of the cpu-only
# suites (core, tools, fuzz), so that build/gpu fits the 64 MiB a carry may hold with the
# working tree.
#
# Checks that the GPU programs were built, that they need no shared library the GPU machine
# may lack (cudart and GoogleTest are linked statically; libsoma is found through $ORIGIN), and
# prints the size of build/gpu (a carried path may hold at most 64 MiB in all). Release flags
# carry no debug information; leftovers of CMake's compiler checks are removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=build/gpu
jobs="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
slim=0
if [[ "${1:-}" == "--slim" ]]; then
  slim=1
  shift
fi

scripts/setup-deps.sh
cmake --preset gpu "$@"
cmake --build --preset gpu --parallel "$jobs"

# What was built, for gpu-check's summary: the copy on the GPU machine has a git state of its own.
{
  echo -n "$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  if git status --porcelain 2>/dev/null | grep -q .; then
    echo -n " with local changes (diff $(git diff HEAD 2>/dev/null | sha256sum | cut -c1-12))"
  fi
  echo ", built $(date -u '+%Y-%m-%d %H:%M UTC')"
} >"$build_dir/build-commit.txt"

# Leftovers of check_language(CUDA) and of compiler identification (several MiB of a.out and
# intermediate files); CMake does not read them again once the compilers are cached.
rm -rf "$build_dir/CMakeFiles/CheckCUDA"
find "$build_dir/CMakeFiles" -maxdepth 3 -type d -path '*/CompilerId*/tmp' -prune \
  -exec rm -rf {} + 2>/dev/null || true

# This machine's C++ runtime, for a GPU machine whose libstdc++ is older than the one these
# programs were linked against (scripts/gpu-check.sh uses it only when ldd says so).
mkdir -p "$build_dir/runtime-libs"
for library in libstdc++.so.6 libgcc_s.so.1; do
  path="$(${CXX:-g++} -print-file-name="$library")"
  if [[ "$path" == /* && -e "$path" ]]; then
    cp -L "$path" "$build_dir/runtime-libs/$library"
  fi
done

missing=()
gpu_tests=()
for test in "$build_dir"/tests/gpu/gpu_*_test; do
  [[ -x "$test" ]] && gpu_tests+=("$test")
done
if ((${#gpu_tests[@]} == 0)); then
  missing+=("$build_dir/tests/gpu/gpu_*_test (is 'add_subdirectory(gpu)' in tests/CMakeLists.txt?)")
fi
for program in "$build_dir/bench/vs_driver" "$build_dir/bench/graph_vs_driver" "$build_dir/bench/alloc_pairs_bench"; do
  [[ -x "$program" ]] || missing+=("$program")
done
if ! grep -q '^SOMA_ENABLE_CUDA:STRING=ON' "$build_dir/CMakeCache.txt"; then
  missing+=("SOMA_ENABLE_CUDA=ON in $build_dir/CMakeCache.txt (is 'include(cmake/SomaCuda.cmake)' in CMakeLists.txt?)")
fi
if ((${#missing[@]} != 0)); then
  echo "build-gpu: not built:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 1
fi

# Every GPU program must run on a machine with only the NVIDIA driver: no libcudart.so,
# no libgtest.so, and libsoma found relative to the program ($ORIGIN).
bad=0
for program in "${gpu_tests[@]}" "$build_dir/bench/vs_driver" "$build_dir/bench/graph_vs_driver" "$build_dir/bench/alloc_pairs_bench"; do
  libraries="$(ldd "$program" 2>&1 || true)"
  if grep -qE 'not found|libcudart|libgtest' <<<"$libraries"; then
    echo "build-gpu: $program needs a library the GPU machine may lack:" >&2
    grep -E 'not found|libcudart|libgtest' <<<"$libraries" >&2
    bad=1
  fi
  if ! readelf -d "$program" | grep -qE 'R(UN)?PATH.*[$]ORIGIN'; then
    echo "build-gpu: $program finds libsoma by an absolute path (no \$ORIGIN run path)" >&2
    bad=1
  fi
done
((bad == 0)) || exit 1

echo
for test in "$build_dir"/tests/*/*_gpu_test; do
  [[ -x "$test" ]] && gpu_tests+=("$test")
done
echo "build-gpu: built ${#gpu_tests[@]} GPU test programs:"
for test in "${gpu_tests[@]}"; do
  count="$("$test" --gtest_list_tests | grep -c '^  ' || true)"
  echo "  $test ($count tests)"
done
echo "build-gpu: benchmarks: $build_dir/bench/vs_driver, $build_dir/bench/graph_vs_driver, $build_dir/bench/alloc_pairs_bench"
echo "build-gpu: glibc/libstdc++ of this machine: $(ldd --version | head -1);" \
  "newest GLIBCXX needed: $(objdump -T "$build_dir"/src/capi/libsoma.so* "${gpu_tests[@]}" 2>/dev/null |
    grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
if ((slim)); then
  find "$build_dir" \( -name '*.o' -path '*/CMakeFiles/*' -o -name '*.a' \) -delete
  for suite in core tools fuzz; do
    find "$build_dir/tests/$suite" -maxdepth 1 -type f -perm -u+x -delete 2>/dev/null || true
  done
  echo "build-gpu: --slim: object files and the cpu-only suites' programs removed"
fi
size_kib="$(du -sk "$build_dir" | cut -f1)"
echo "build-gpu: $build_dir is $((size_kib / 1024)) MiB ($size_kib KiB); carry limit 64 MiB in all"
if ((size_kib > 60 * 1024)); then
  echo "build-gpu: WARNING: $build_dir is close to or over the 64 MiB carry limit" >&2
fi
echo "build-gpu: on the GPU machine, from the repository root: bash scripts/gpu-check.sh"
