#!/usr/bin/env bash
# Runs Stoker's CPU test suite (every test not tagged `gpu`) under AddressSanitizer (+UBSan)
# and under ThreadSanitizer (.bazelrc: --config=asan, --config=tsan), logs each run, and
# prints a summary: tests passed per config and every sanitizer report found in the test logs
# (a report fails the config even when its test passed, e.g. one from a child process).
#
#   tools/sanitizers.sh [--configs="asan tsan"] [--out=bench/results/sanitizers-DATE]
#                       [--asan_output_base=DIR] [--tsan_output_base=DIR] [--jobs=2]
#                       [--groups="plain torch mpi"] [TARGET...]
#
# Without TARGETs the suite is `tests(//...)` less the `gpu` ones, in three groups (below;
# --groups runs some of them).
# The sanitizer flags are copts, which do not change Bazel's output directory: give each
# config an output base of its own to keep both builds (and the plain one) instead of
# rebuilding everything at every switch.
#
# Suppressions (tools/tsan_suppressions.txt, tools/lsan_suppressions.txt) cover only the
# uninstrumented libraries: libtorch/c10 with its OpenMP runtime, and Open MPI; each entry
# says why. Slow on a small machine: both configs rebuild everything they test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
configs="asan tsan"
out="$root/bench/results/sanitizers-$(date -u +%F)"
declare -A output_base
jobs=2
groups="plain torch mpi"
targets=()
for arg in "$@"; do
  case "$arg" in
    --configs=*) configs="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --asan_output_base=*) output_base[asan]="${arg#*=}" ;;
    --tsan_output_base=*) output_base[tsan]="${arg#*=}" ;;
    --jobs=*) jobs="${arg#*=}" ;;
    --groups=*) groups="${arg#*=}" ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "tools/sanitizers.sh: unknown flag $arg (see --help)" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done
# Three groups, cheapest first, so that a run cut short has the most tests done: the tests
# that link neither libtorch nor Open MPI (common, data service, launcher, fuzz seeds, the
# trainer's plain units), then the ones that link libtorch but not Open MPI, then those that
# link Open MPI or run the trainer under mpirun (`rdeps` of @mpi//:mpi, data dependencies
# included). In the last, ASan's leak check is off: Open MPI unloads (dlclose) its components
# at MPI_Finalize, so what they keep until exit is reported as leaked from "<unknown
# module>", which no suppression can name. Leaks of the data service, the ring and the
# launcher are still checked by the first group (service_test, data_service_binary_test and
# job_test run the real programs).
all_tests='tests(//...) except attr(tags, "\bgpu\b", tests(//...))'
mpi_tests="($all_tests) intersect rdeps(//..., @mpi//:mpi)"
torch_tests="(($all_tests) intersect rdeps(//..., @libtorch//:libtorch)) except ($mpi_tests)"
plain_tests="($all_tests) except ($mpi_tests) except ($torch_tests)"
plain_targets=()
torch_targets=()
mpi_targets=()
explicit_targets=("${targets[@]}")
python="${STOKER_PYTHON:-$(command -v python3)}"
mkdir -p "$out"

asan_options=abort_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:protect_shadow_gap=0
declare -A unit_env mpi_env
unit_env[asan]="--test_env=ASAN_OPTIONS=$asan_options:detect_leaks=1
--test_env=LSAN_OPTIONS=suppressions=$root/tools/lsan_suppressions.txt:print_suppressions=0
--test_env=UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
mpi_env[asan]="--test_env=ASAN_OPTIONS=$asan_options:detect_leaks=0
--test_env=UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
# Debian's Abseil is not built with TSan, so TSan cannot see the synchronisation of
# absl::Mutex, CondVar and Notification: tools/tsan_absl_annotations.cc, preloaded, tells it
# (without it every absl::Mutex-guarded access is reported as a race).
annotations_dir=/tmp/stoker-tsan-absl
if [[ " $configs " == *" tsan "* ]]; then
  mkdir -p "$annotations_dir"
  g++ -std=c++17 -O1 -shared -fPIC "$root/tools/tsan_absl_annotations.cc" \
    -o "$annotations_dir/libtsan_absl_annotations.so" -ldl
fi
unit_env[tsan]="--test_env=TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tools/tsan_suppressions.txt
--test_env=LD_PRELOAD=$annotations_dir/libtsan_absl_annotations.so
--test_env=OMP_NUM_THREADS=1"
mpi_env[tsan]="${unit_env[tsan]}"

# run_group CONFIG ENV TARGET...: one `bazel test`, appended to the config's log; sets rc.
run_group() {
  local config="$1" group_env="$2"; shift 2
  echo "== $config: bazel test $* (log: $log)"
  echo "== bazel test --config=$config $group_env $*" | tr '\n' ' ' >> "$log"
  echo >> "$log"
  set +e
  # shellcheck disable=SC2086
  (cd "$root" && nice -n 15 "${bazel[@]}" test --config="$config" --jobs="$jobs" \
     --build_tests_only --keep_going --test_tag_filters=-gpu --local_test_jobs=1 --experimental_convenience_symlinks=ignore \
     --test_output=errors --test_env=STOKER_PYTHON="$python" $group_env "$@") >> "$log" 2>&1
  local group_rc=$?
  set -e
  [[ "$group_rc" -eq 0 ]] || rc=$group_rc
}

declare -A result
status=0
for config in $configs; do
  [[ -n "${unit_env[$config]:-}" ]] || { echo "tools/sanitizers.sh: unknown config $config" >&2; exit 2; }
  log="$out/$config.log"
  : > "$log"
  bazel=(bazel)
  [[ -n "${output_base[$config]:-}" ]] && bazel+=(--output_base="${output_base[$config]}")
  if [[ ${#explicit_targets[@]} -gt 0 ]]; then
    plain_targets=("${explicit_targets[@]}")
  else
    for group in plain torch mpi; do
      query="${group}_tests"
      mapfile -t "${group}_targets" < <(cd "$root" && "${bazel[@]}" query --noshow_progress \
        "${!query}" 2>/dev/null)
    done
    [[ ${#plain_targets[@]} -gt 0 ]] || { echo "tools/sanitizers.sh: bazel query found no tests" >&2; exit 1; }
  fi
  echo "== $config: ${#plain_targets[@]} tests without libtorch or Open MPI, ${#torch_targets[@]}" \
    "with libtorch (both with the leak check), ${#mpi_targets[@]} with Open MPI (without)" | tee -a "$log"
  marker=$(mktemp)
  rc=0
  # --groups picks which of the three run (explicit TARGETs are the first group's).
  [[ " $groups " != *" plain "* || ${#plain_targets[@]} -eq 0 ]] ||
    run_group "$config" "${unit_env[$config]}" "${plain_targets[@]}"
  [[ " $groups " != *" torch "* || ${#torch_targets[@]} -eq 0 ]] ||
    run_group "$config" "${unit_env[$config]}" "${torch_targets[@]}"
  [[ " $groups " != *" mpi "* || ${#mpi_targets[@]} -eq 0 ]] ||
    run_group "$config" "${mpi_env[$config]}" "${mpi_targets[@]}"
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
      echo "no sanitizer report in any test log of this run"
    fi
  } | tee -a "$log"
  if [[ "$rc" -eq 0 && -z "$reports" ]]; then result[$config]="clean"; else result[$config]="FAILED"; status=1; fi
done
echo
for config in $configs; do echo "$config: ${result[$config]}"; done
exit $status
