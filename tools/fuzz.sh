#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ through Bazel (`--config=fuzz` in .bazelrc: clang,
# -fsanitize=fuzzer,address,undefined, the same libraries as the data service), makes seed
# corpora (tools/fuzz_seeds.py: valid control messages and near misses, small JPEGs and
# PNGs of every kind), runs each target for a bounded time and fails on any crash, leak,
# timeout or sanitizer report.
#
#   tools/fuzz.sh [--seconds=60] [--targets="control_protocol image_decode ring_header
#                 checkpoint_reader"] [--work=DIR]
#   (further targets, not run by default: safetensors export_archive, whose seeds are
#   checked in under fuzz/seeds/)
#                 [--fresh_scratch_after_error] [--bazel_args="--jobs=2"]
#
# --fresh_scratch_after_error: the image target replaces its reused decoder after an input
# that fails, stepping around faults that need the state an earlier bad input left (to
# look for other faults once such a one is known; the default run checks that state too).
#
# Crash inputs are kept under the work directory (default: a fresh /tmp/stoker-fuzz.*)
# as crash-*/leak-*/timeout-*; replay one with `<work>/<target>_fuzzer <file>`.
set -euo pipefail

seconds=60
targets="control_protocol image_decode ring_header checkpoint_reader"
work=""
bazel_args=""
for arg in "$@"; do
  case "$arg" in
    --seconds=*) seconds="${arg#*=}" ;;
    --targets=*) targets="${arg#*=}" ;;
    --work=*) work="${arg#*=}" ;;
    --fresh_scratch_after_error) export STOKER_FUZZ_FRESH_SCRATCH_AFTER_ERROR=1 ;;
    --bazel_args=*) bazel_args="${arg#*=}" ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "tools/fuzz.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] ||
  { echo "tools/fuzz.sh: --seconds must be a positive integer, got $seconds" >&2; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
python="${STOKER_PYTHON:-python3}"
command -v clang >/dev/null || { echo "tools/fuzz.sh: clang not found (install clang)" >&2; exit 2; }
work="${work:-$(mktemp -d /tmp/stoker-fuzz.XXXXXX)}"
mkdir -p "$work"

declare -A max_len
max_len[control_protocol]=1024
max_len[image_decode]=65536
max_len[ring_header]=65536
max_len[checkpoint_reader]=16384
max_len[safetensors]=4096
max_len[export_archive]=65536
for target in $targets; do
  [[ -n "${max_len[$target]:-}" ]] || { echo "tools/fuzz.sh: unknown target $target" >&2; exit 2; }
done

echo "== tools/fuzz.sh: $(date -u +%FT%TZ), $seconds s per target, work directory $work"
echo "== $(clang --version | head -n 1)${STOKER_FUZZ_FRESH_SCRATCH_AFTER_ERROR:+; image target: a fresh decoder after each failing input}"
labels=()
for target in $targets; do labels+=("//fuzz:${target}_fuzzer"); done
echo "== building: bazel build --config=fuzz $bazel_args ${labels[*]}"
# shellcheck disable=SC2086
(cd "$root" && bazel build --config=fuzz $bazel_args "${labels[@]}")
bin_dir="$(cd "$root" && bazel info --config=fuzz bazel-bin 2>/dev/null)"
"$python" "$root/tools/fuzz_seeds.py" "$work/seeds/control_protocol" "$work/seeds/image_decode"

# The model-file targets link libtorch, whose allocations LeakSanitizer sees but Stoker does
# not own (its registries, and its zip reader's state when its constructor refuses an
# archive): the suppressions of the ASan test runs, which name only libraries that are not
# Stoker's, so a leak from Stoker's own code still fails the run.
export LSAN_OPTIONS="suppressions=$root/tools/lsan_suppressions.txt:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
status=0
for target in $targets; do
  binary="$work/${target}_fuzzer"
  cp -f "$bin_dir/fuzz/${target}_fuzzer" "$binary"
  if [[ -d "$root/fuzz/seeds/$target" && ! -d "$work/seeds/$target" ]]; then  # checked in
    mkdir -p "$work/seeds/$target"
    cp "$root/fuzz/seeds/$target/"* "$work/seeds/$target/"
  fi
  if [[ ! -d "$work/seeds/$target" ]]; then  # targets that write their own seeds
    mkdir -p "$work/seeds/$target"
    STOKER_FUZZ_WRITE_SEEDS="$work/seeds/$target" "$binary"
  fi
  corpus="$work/corpus/$target"
  mkdir -p "$corpus" "$work/artifacts/$target"
  echo "== running $target for $seconds s (seeds: $(ls "$work/seeds/$target" | wc -l) files)"
  set +e
  FUZZ_PREVIOUS_INPUT="$work/artifacts/$target/previous_input" \
  "$binary" "$corpus" "$work/seeds/$target" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=2560 -max_len="${max_len[$target]}" -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$target/" 2>&1 |
    grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' # keep the log to its findings and stats
  rc=${PIPESTATUS[0]}
  set -e
  found=$(ls "$work/artifacts/$target" | wc -l)
  if [[ "$rc" -ne 0 || "$found" -ne 0 ]]; then
    echo "== FAIL: $target exited $rc; found: $(ls "$work/artifacts/$target" | tr '\n' ' ')"
    if [[ -e "$work/artifacts/$target/previous_input" ]]; then
      echo "== replay (the fault needs the input before it): $binary" \
           "$work/artifacts/$target/previous_input $work/artifacts/$target/crash-*"
    fi
    status=1
  else
    echo "== PASS: $target ran $seconds s without a finding (corpus now $(ls "$corpus" | wc -l) inputs)"
  fi
done
exit $status
