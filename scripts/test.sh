#!/usr/bin/env bash
# Builds soma with the `dev` preset (Debug, expensive checks) and runs the whole test suite.
# Extra arguments go to ctest, e.g. `scripts/test.sh -L cpu` or `scripts/test.sh -R free_index`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup-deps.sh
cmake --preset dev
cmake --build --preset dev
ctest --preset dev "$@"
