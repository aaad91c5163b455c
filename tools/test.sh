#!/usr/bin/env bash
# The README's test command: installs what is missing (tools/setup.sh), then runs the
# whole test suite with Bazel, then the source checks (tools/check_visibility.sh,
# tools/check_format.sh, tools/check_thread_safety.sh). Tests tagged `gpu` run only where a
# GPU is visible. Extra arguments go to `bazel test` (e.g. a narrower pattern than //...)
# and leave the source checks out.
set -euo pipefail
cd "$(dirname "$0")/.."
STOKER_SETUP_QUIET=1 tools/setup.sh

python="$(python3 -c 'import sys; print(sys.executable)')"
args=(--test_env=STOKER_PYTHON="$python")
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "test: no GPU visible; leaving out tests tagged gpu"
  args+=(--test_tag_filters=-gpu)
fi
targets=("$@")
(( ${#targets[@]} )) || targets=(//...)
rc=0
bazel test "${args[@]}" "${targets[@]}" || rc=$?

# Source checks, when the whole suite runs (no arguments): the rooms' visibility walls, the
# formatting of the C++ files, and clang's thread-safety analysis of the lock annotations. Each ends with a line in
# Bazel's summary format (//tools:SCRIPT PASSED or FAILED), which .ci/run counts.
if (( $# == 0 )); then
  for check in check_visibility.sh check_format.sh check_thread_safety.sh; do
    if tools/"$check"; then
      printf '%-60s PASSED\n' "//tools:$check"
    else
      printf '%-60s FAILED\n' "//tools:$check"
      echo "test: tools/$check failed: its output above says what to fix" >&2
      rc=1
    fi
  done
fi
exit "$rc"
