#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,address,undefined; the
# Bazel toolchain here is gcc, so this compiles the few sources they need directly, against
# the system's Abseil, libjpeg-turbo and libpng), makes seed corpora (tools/fuzz_seeds.py:
# valid control messages and near misses, small JPEGs and PNGs of every kind), runs each
# target for a bounded time and fails on any crash, leak, timeout or sanitizer report.
#
#   tools/fuzz.sh [--seconds=60] [--targets="control_protocol image_decode"] [--work=DIR]
#                 [--fresh_scratch_after_error]
#
# --fresh_scratch_after_error: the image target replaces its reused decoder after an input
# that fails, stepping around faults that need the state an earlier bad input left (to
# look for other faults once such a one is known; the default run checks that state too).
#
# Crash inputs are kept under the work directory (default: a fresh /tmp/stoker-fuzz.*)
# as crash-*/leak-*/timeout-*; replay one with `<work>/<target>_fuzzer <file>`.
set -euo pipefail

seconds=60
targets="control_protocol image_decode"
work=""
for arg in "$@"; do
  case "$arg" in
    --seconds=*) seconds="${arg#*=}" ;;
    --targets=*) targets="${arg#*=}" ;;
    --work=*) work="${arg#*=}" ;;
    --fresh_scratch_after_error) export STOKER_FUZZ_FRESH_SCRATCH_AFTER_ERROR=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "tools/fuzz.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] ||
  { echo "tools/fuzz.sh: --seconds must be a positive integer, got $seconds" >&2; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
cxx="${CXX_FUZZ:-clang++}"
python="${STOKER_PYTHON:-python3}"
command -v "$cxx" >/dev/null || { echo "tools/fuzz.sh: $cxx not found (install clang)" >&2; exit 2; }
work="${work:-$(mktemp -d /tmp/stoker-fuzz.XXXXXX)}"
mkdir -p "$work"

flags=(-std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -I"$root")
absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_time)
image_libs="$(pkg-config --libs libpng libturbojpeg) -ljpeg"

declare -A sources max_len
sources[control_protocol]="fuzz/control_protocol_fuzzer.cc data_service/ring/control_protocol.cc
  data_service/ring/ring.cc common/errno_status.cc"
max_len[control_protocol]=1024
sources[image_decode]="fuzz/image_decode_fuzzer.cc data_service/image/decode.cc
  data_service/image/transforms.cc data_service/image/resample.cc
  data_service/image/sample_rng.cc"
max_len[image_decode]=65536

echo "== tools/fuzz.sh: $(date -u +%FT%TZ), $seconds s per target, work directory $work"
echo "== $("$cxx" --version | head -n 1)${STOKER_FUZZ_FRESH_SCRATCH_AFTER_ERROR:+; image target: a fresh decoder after each failing input}"
"$python" "$root/tools/fuzz_seeds.py" "$work/seeds/control_protocol" "$work/seeds/image_decode"

status=0
for target in $targets; do
  [[ -n "${sources[$target]:-}" ]] || { echo "tools/fuzz.sh: unknown target $target" >&2; exit 2; }
  binary="$work/${target}_fuzzer"
  libs="$absl_libs"
  [[ "$target" == image_decode ]] && libs="$libs $image_libs"
  echo "== building $target: $cxx ${flags[*]} ${sources[$target]//$'\n'/ }"
  # shellcheck disable=SC2086
  (cd "$root" && "$cxx" "${flags[@]}" ${sources[$target]} $libs -o "$binary")
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
