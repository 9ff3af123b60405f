# shellcheck shell=bash
# Shared by scripts/gpu-check.sh, scripts/torch-check.sh and scripts/python-gpu-check.sh
# (sourced, not run, with the repository root as the working directory): the options, the output
# folder, the summary file and its header, and the two ways a check speaks.
#
#   check_start <name> <default out folder> <step column width> <options> [arguments...]
# reads the arguments first, so that --help and a wrong argument create nothing: --quick sets
# quick=1, --no-bench run_bench=0, --no-sanitizer run_sanitizer=0, each accepted only where
# <options> (space-separated) names it; -h or --help prints the script's leading comment and
# exits 0; anything else exits 3. Then sets repo_root, OUT (absolute, created), BUILD_DIR
# (default build/gpu) and summary (emptied, then headed by the check's name, date, host,
# repository, build, out and commit). Also defined here:
#   say <text...>                     a progress line on stdout
#   record <verdict> <step> <detail>  a summary line (PASS, FAIL, WARN, SKIP, INFO), also shown
#   check_libraries <build> <program...>  the programs' libraries (below)
#   gtest_counts <log>                "N passed, N failed, N skipped" of a gtest console log
# shellcheck disable=SC2034 # quick, run_bench, run_sanitizer: read by the sourcing script
check_start() {
  local name="$1" default_out="$2" width="$3" options="$4" arg
  shift 4
  check_name="$name"
  step_width="$width"
  quick=0 run_bench=1 run_sanitizer=1
  for arg in "$@"; do
    case "$arg" in
      -h | --help)
        # The comment block under the #! line; the check scripts live in scripts/.
        awk 'NR > 1 && !/^#/ { exit } NR > 1' "scripts/${0##*/}"
        exit 0
        ;;
    esac
    if [[ " $options " != *" $arg "* ]]; then
      echo "$name: unknown argument '$arg' (see --help)" >&2
      exit 3
    fi
    case "$arg" in
      --quick) quick=1 ;;
      --no-bench) run_bench=0 ;;
      --no-sanitizer) run_sanitizer=0 ;;
    esac
  done

  repo_root="$(pwd -P)"
  OUT="${OUT:-$default_out}"
  BUILD_DIR="${BUILD_DIR:-build/gpu}"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd -P)"
  summary="$OUT/summary.txt"
  : >"$summary"
  {
    echo "soma $name, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), host $(hostname)"
    echo "repository $repo_root, build $BUILD_DIR, out $OUT"
    # The build's own record (scripts/build-gpu.sh) where there is one: a build carried to
    # another machine was made from the commit it names, whatever that copy's git state says.
    if [[ -f "$BUILD_DIR/build-commit.txt" ]]; then
      echo "build of $(cat "$BUILD_DIR/build-commit.txt")"
    else
      echo "commit $(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo '?')" \
        "$(git -C "$repo_root" status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
    fi
    echo
  } | tee -a "$summary"
}
say() { echo "$check_name: $*"; }
record() {
  local verdict="$1" step="$2"
  shift 2
  printf "%-5s %-${step_width}s %s\n" "$verdict" "$step" "$*" | tee -a "$summary"
}

# check_libraries <build directory (absolute)> <program...>: what each program links (ldd) goes
# to $OUT/ldd.log. Where this machine's libstdc++ is older than the build machine's, the copy
# carried in <build>/runtime-libs goes first in LD_LIBRARY_PATH (exported) and ldd runs again;
# a library still missing is a FAIL and exits 3.
check_libraries() {
  local build="$1"
  shift
  check_ldd "$@"
  if grep -qE 'GLIBCXX_[0-9.]+. not found|CXXABI_[0-9.]+. not found' "$OUT/ldd.log" &&
    [[ -d "$build/runtime-libs" ]]; then
    export LD_LIBRARY_PATH="$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    record INFO setup "libstdc++ here is too old for the build; using $BUILD_DIR/runtime-libs"
    check_ldd "$@"
  fi
  if grep -qE 'not found' "$OUT/ldd.log"; then
    record FAIL setup "a program needs a library that is missing here (see $OUT/ldd.log):"
    grep -E 'not found' "$OUT/ldd.log" | sort -u | tee -a "$summary"
    exit 3
  fi
}
check_ldd() {
  local program
  for program in "$@"; do
    echo "-- $program"
    ldd "$program" 2>&1
  done >"$OUT/ldd.log"
}

# Counts of a gtest console log: "N passed, N failed, N skipped".
gtest_counts() {
  local log="$1" passed failed skipped
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$log" | tail -1)"
  failed="$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below:.*/\1/p' "$log" | tail -1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below:.*/\1/p' "$log" | tail -1)"
  echo "${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
}
