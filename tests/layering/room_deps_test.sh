#!/usr/bin/env bash
# The trainer's rooms depend on each other in one direction only (docs/ARCHITECTURE.md,
# "Rooms and their walls"): for each room, everything its rules reach (deps() of all of
# them, a genquery's output) lies in no trainer package but the room itself and the rooms
# the map puts below it.
#
#   room_deps_test.sh DEPS_FILE ALLOWED [DEPS_FILE ALLOWED]...
#
# ALLOWED is the room's own package first, then the packages it may use, separated by
# commas (e.g. trainer/graph,trainer/nn).
set -euo pipefail

failed=0
while (( $# >= 2 )); do
  deps_file=$1
  allowed=$2
  shift 2
  room=${allowed%%,*}
  if ! grep -q "^//${room}:" "$deps_file"; then
    echo "FAIL: $deps_file does not list //$room's own targets: is it deps() of $room?"
    failed=1
    continue
  fi
  while IFS= read -r label; do
    package=${label#//}
    package=${package%%:*}
    if [[ ",$allowed," != *",$package,"* ]]; then
      echo "FAIL: //$room reaches $label; it may use only ${allowed//,/, }"
      failed=1
    fi
  done < <(grep -E '^//trainer(/[^:]*)?:' "$deps_file")
done
if (( $# != 0 )); then
  echo "usage: room_deps_test.sh DEPS_FILE ALLOWED [DEPS_FILE ALLOWED]..."
  exit 2
fi
(( failed == 0 )) && echo "PASS: every trainer room depends only on the rooms below it"
exit "$failed"
