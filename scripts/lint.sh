#!/usr/bin/env bash
# Checks the format of every source (scripts/format.sh --check), then runs clang-tidy
# (.clang-tidy: every enabled check is an error) over the library and the tools, with the compile
# commands of the `dev` build (scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SOMA_SETUP_LINT=1 scripts/setup-deps.sh
scripts/format.sh --check
[[ -f build/dev/compile_commands.json ]] || cmake --preset dev
# clang-tidy is clang 14, which does not know GCC's -mtls-dialect=gnu2 (cmake/SomaOptions.cmake):
# it reads the dev build's commands without that flag.
commands="$(mktemp -d)"
trap 'rm -rf "$commands"' EXIT
sed 's/ -mtls-dialect=gnu2//g' build/dev/compile_commands.json >"$commands/compile_commands.json"
mapfile -t sources < <(git ls-files 'src/*.cpp' 'tools/*.cpp')
echo "lint: clang-tidy over ${#sources[@]} files"
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -n 4 clang-tidy -p "$commands" --quiet 2>/dev/null
echo "lint: no findings"
