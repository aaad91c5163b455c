#!/usr/bin/env bash
# Runs the ring, data-service and end-to-end CPU tests under AddressSanitizer (+UBSan) and
# under ThreadSanitizer (.bazelrc: --config=asan, --config=tsan), logs each run, and prints
# a summary: tests passed per config and every sanitizer report found in the test logs (a
# report fails the config even when its test passed, e.g. one from a child process).
#
#   tools/sanitizers.sh [--configs="asan tsan"] [--out=bench/results/2026-11-30-reliability]
#                       [--asan_output_base=DIR] [--tsan_output_base=DIR] [--jobs=2] [TARGET...]
#
# The sanitizer flags are copts, which do not change Bazel's output directory: give each
# config an output base of its own to keep both builds (and the plain one) instead of
# rebuilding everything at every switch.
#
# Suppressions (tools/tsan_suppressions.txt, tools/lsan_suppressions.txt) cover only the
# uninstrumented libraries: libtorch/c10 with its OpenMP runtime, and Open MPI; each file
# says why. Slow on a small machine: both configs rebuild everything they test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
configs="asan tsan"
out="$root/bench/results/2026-11-30-reliability"
declare -A output_base
jobs=2
targets=()
for arg in "$@"; do
  case "$arg" in
    --configs=*) configs="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --asan_output_base=*) output_base[asan]="${arg#*=}" ;;
    --tsan_output_base=*) output_base[tsan]="${arg#*=}" ;;
    --jobs=*) jobs="${arg#*=}" ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "tools/sanitizers.sh: unknown flag $arg (see --help)" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(//data_service/... //tests:e2e_cpu_test //tests:isolation_service_test
           //tests:isolation_two_jobs_test)
fi
python="${STOKER_PYTHON:-$(command -v python3)}"
mkdir -p "$out"

# Options every process of a test reads from its environment (the data service and the
# ranks under mpirun included). They extend the config's own.
declare -A env
env[asan]="--test_env=ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:protect_shadow_gap=0
--test_env=LSAN_OPTIONS=suppressions=$root/tools/lsan_suppressions.txt:print_suppressions=0
--test_env=UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
env[tsan]="--test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tools/tsan_suppressions.txt
--test_env=OMP_NUM_THREADS=1"

declare -A result
status=0
for config in $configs; do
  [[ -n "${env[$config]:-}" ]] || { echo "tools/sanitizers.sh: unknown config $config" >&2; exit 2; }
  log="$out/$config.log"
  bazel=(bazel)
  [[ -n "${output_base[$config]:-}" ]] && bazel+=(--output_base="${output_base[$config]}")
  marker=$(mktemp)
  echo "== $config: ${targets[*]} (log: $log)"
  set +e
  # shellcheck disable=SC2046
  (cd "$root" && nice -n 10 "${bazel[@]}" test --config="$config" --jobs="$jobs" \
     --local_test_jobs=1 --experimental_convenience_symlinks=ignore --test_output=errors \
     --test_env=STOKER_PYTHON="$python" ${env[$config]} "${targets[@]}") > "$log" 2>&1
  rc=$?
  set -e
  testlogs=$(cd "$root" && "${bazel[@]}" info --config="$config" bazel-testlogs 2>/dev/null)
  # Every sanitizer report in the test logs of this run, whoever printed it.
  reports=$(find "$testlogs" -name test.log -newer "$marker" -print0 2>/dev/null |
              xargs -0 -r grep -lE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|runtime error:" || true)
  rm -f "$marker"
  {
    echo
    echo "== summary of $config (bazel exit $rc)"
    grep -E "^//.*(PASSED|FAILED|TIMEOUT|NO STATUS|SKIPPED)" "$log" || true
    grep -E "^Executed [0-9]+ out of [0-9]+ tests" "$log" || true
    if [[ -n "$reports" ]]; then
      echo "sanitizer reports in:"
      for f in $reports; do
        echo "  $f"
        grep -hE -A12 "ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|runtime error:" "$f" | head -40
      done
    else
      echo "no sanitizer report in any test log"
    fi
  } | tee -a "$log"
  if [[ "$rc" -eq 0 && -z "$reports" ]]; then result[$config]="clean"; else result[$config]="FAILED"; status=1; fi
done
echo
for config in $configs; do echo "$config: ${result[$config]}"; done
exit $status
