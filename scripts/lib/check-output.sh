# Shared by scripts/gpu-check.sh and scripts/torch-check.sh (sourced, not run): the output
# folder, the summary file and the two ways a check speaks.
#
#   check_output_setup <name> <default out folder> <step column width>
# sets OUT (absolute, created), BUILD_DIR (default build/gpu) and summary (emptied), and defines
#   say <text...>                     a progress line on stdout
#   record <verdict> <step> <detail>  a summary line (PASS, FAIL, WARN, SKIP, INFO), also shown
check_output_setup() {
  local name="$1" default_out="$2" width="$3"
  OUT="${OUT:-$default_out}"
  BUILD_DIR="${BUILD_DIR:-build/gpu}"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd -P)"
  summary="$OUT/summary.txt"
  : >"$summary"
  check_name="$name"
  step_width="$width"
}
say() { echo "$check_name: $*"; }
record() {
  local verdict="$1" step="$2"
  shift 2
  printf "%-5s %-${step_width}s %s\n" "$verdict" "$step" "$*" | tee -a "$summary"
}
