#!/usr/bin/env bash
# Formats every C, C++ and CUDA source of the repository with .clang-format (clang-format 14,
# from Debian), or, with --check, lists the files it would change and fails if there are any.
#
#   scripts/format.sh           # rewrite files in place
#   scripts/format.sh --check   # CI (scripts/lint.sh): change nothing, exit 1 on a difference
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.inc' | grep -v '^tests/fuzz/corpus/')
if [[ "${1:-}" == --check ]]; then
  unformatted=()
  for file in "${sources[@]}"; do
    if ! clang-format --dry-run --Werror "$file" >/dev/null 2>&1; then unformatted+=("$file"); fi
  done
  if ((${#unformatted[@]} != 0)); then
    echo "format: ${#unformatted[@]} file(s) differ from .clang-format (run scripts/format.sh):"
    printf '  %s\n' "${unformatted[@]}"
    exit 1
  fi
  echo "format: ${#sources[@]} files match .clang-format"
else
  printf '%s\n' "${sources[@]}" | xargs -n 16 clang-format -i
  echo "format: ${#sources[@]} files formatted"
fi
