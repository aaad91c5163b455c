#!/usr/bin/env bash
# The README's test command: installs what is missing (tools/setup.sh), then runs the
# whole test suite with Bazel. Tests tagged `gpu` run only where a GPU is visible.
# Extra arguments go to `bazel test` (e.g. a narrower pattern than //...).
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
tools/check_visibility.sh
exec bazel test "${args[@]}" "${targets[@]}"
