#!/usr/bin/env bash
# Installs the Python package the way docs/python.md tells a user to, into a fresh virtual
# environment made by Debian's python3 with system site packages, and runs its tests against
# the installed copy (cpu backend). Downloads nothing: pip runs with --no-build-isolation (and
# --no-index here, so that a missing build dependency fails instead of being fetched).
#
#   scripts/python-check.sh          # venv in build/venv, CMake build in build/python
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd -P)"

scripts/setup-deps.sh
python=/usr/bin/python3  # Debian's: python3-pytest, -setuptools and -wheel belong to it
[[ -x "$python" ]] || python=python3
venv="$repo/build/venv"
rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --no-build-isolation --no-index --no-deps "$repo"

# From outside the repository, so `import soma` is the installed package, not python/.
cd "$(mktemp -d)"
"$venv/bin/python" - <<'PY'
import os, soma
package = os.path.dirname(soma.__file__)
assert "site-packages" in package, package
assert soma.library_path().startswith(os.path.join(package, "lib")), soma.library_path()
import soma.torch
assert soma.torch.library_path().startswith(os.path.join(package, "lib"))
print(f"python-check: soma {soma.__version__} installed at {package}, {soma.backend()} backend")
PY
SOMA_BACKEND=cpu "$venv/bin/python" -m pytest -p no:cacheprovider -rs "$repo/python/tests"
