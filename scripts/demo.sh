#!/usr/bin/env bash
# Builds soma with the `release` preset and runs `soma demo`. Extra arguments go to the demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup-deps.sh
cmake --preset release
cmake --build --preset release --target soma_cli
exec build/release/tools/soma demo "$@"
