#!/usr/bin/env bash
# Installs, with apt-get, what building and testing soma needs, and only what is missing.
# Idempotent: when everything is present it runs no apt command and takes well under a second.
# Runs as root; otherwise through sudo where sudo exists.
#
#   scripts/setup-deps.sh            # build + test dependencies
#   SOMA_SETUP_LINT=1 scripts/setup-deps.sh   # also clang-format and clang-tidy
set -euo pipefail

# Debian package -> "how to tell it is there". A command check accepts a tool that came from
# elsewhere (a newer cmake in /usr/local, say); libraries are checked with dpkg.
packages=(
  cmake
  make
  gcc
  g++
  pkg-config
  python3
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  util-linux         # setarch, used by .ci/run for the ThreadSanitizer build
  clang              # clang++-14 and libFuzzer: the `fuzz` preset (scripts/fuzz.sh)
  libclang-rt-14-dev # clang's sanitizer and libFuzzer runtimes
  chromium           # headless, renders `soma report`'s page in its test (tests/tools)
  python3-pytest     # the Python package's tests (python/tests, scripts/python-check.sh)
  python3-venv       # scripts/python-check.sh installs the package into a virtual environment
  python3-pip
  python3-setuptools # the package's build backend (pyproject.toml), used without isolation
  python3-wheel
)
if [[ "${SOMA_SETUP_LINT:-0}" == 1 ]]; then
  packages+=(clang-format clang-tidy)
fi

is_installed() {
  local package="$1"
  case "$package" in
    cmake)
      # CMakePresets.json version 5 needs CMake >= 3.24; the project asks for 3.25.
      command -v cmake >/dev/null 2>&1 || return 1
      local version
      version="$(cmake --version | sed -n '1s/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')"
      [[ -n "$version" ]] || return 1
      local major="${version%%.*}" minor="${version#*.}"
      ((major > 3 || (major == 3 && minor >= 25)))
      ;;
    make) command -v make >/dev/null 2>&1 ;;
    gcc) command -v gcc >/dev/null 2>&1 ;;
    g++) command -v g++ >/dev/null 2>&1 ;;
    pkg-config) command -v pkg-config >/dev/null 2>&1 ;;
    python3) command -v python3 >/dev/null 2>&1 ;;
    util-linux) command -v setarch >/dev/null 2>&1 ;;
    clang) command -v clang++-14 >/dev/null 2>&1 ;;
    chromium) command -v chromium >/dev/null 2>&1 ;;
    clang-format) command -v clang-format >/dev/null 2>&1 ;;
    clang-tidy) command -v clang-tidy >/dev/null 2>&1 ;;
    *) dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' ;;
  esac
}

missing=()
for package in "${packages[@]}"; do
  if ! is_installed "$package"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup-deps: all build and test dependencies are present"
  exit 0
fi

echo "setup-deps: installing ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-deps: apt-get not found; install these by hand: ${missing[*]}" >&2
  exit 1
fi

as_root=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "setup-deps: not root and no sudo; install these by hand: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"

still_missing=()
for package in "${missing[@]}"; do
  if ! is_installed "$package"; then
    still_missing+=("$package")
  fi
done
if ((${#still_missing[@]} != 0)); then
  echo "setup-deps: still missing after apt-get: ${still_missing[*]}" >&2
  exit 1
fi
echo "setup-deps: done"
