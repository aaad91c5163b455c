#!/usr/bin/env bash
# Checks that Bazel's visibility holds the walls between the trainer's rooms
# (docs/ARCHITECTURE.md, "Rooms and their walls"): each manual target of //tests/layering
# uses a target it is not allowed to, and analysing it must fail with "is not visible".
# Analysis only (bazel build --nobuild), so it takes seconds. Run by tools/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

violations=(
  //tests/layering:uses_a_private_target
  //tests/layering:uses_the_run_s_room_from_outside
)
failed=0
for target in "${violations[@]}"; do
  if output="$(bazel build --nobuild "$target" 2>&1)"; then
    echo "check_visibility: FAIL: $target was analysed without error; a wall is open"
    failed=1
  elif ! grep -q "is not visible" <<<"$output"; then
    echo "check_visibility: FAIL: $target failed for another reason than visibility:"
    echo "$output" | tail -20
    failed=1
  fi
done
(( failed == 0 )) && echo "check_visibility: every wall holds (${#violations[@]} refused as not visible)"
exit "$failed"
