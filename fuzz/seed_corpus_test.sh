#!/usr/bin/env bash
# A fuzz target over its seed corpus: seed_corpus_test.sh FUZZER CORPUS, CORPUS being
# control_protocol or image_decode (the two corpora tools/fuzz_seeds.py writes),
# safetensors or export_archive (checked in under fuzz/seeds/, fuzz/seeds/make_seeds.py),
# or ring_header or checkpoint_reader (whose targets write their own with
# STOKER_FUZZ_WRITE_SEEDS). Every seed
# must run through the target without a finding (the target aborts on one).
set -euo pipefail
fuzzer="$1" corpus="$2"
root="${TEST_SRCDIR}/stoker"
out="${TEST_TMPDIR:-$(mktemp -d)}"
case "$corpus" in
  control_protocol|image_decode)
    "${STOKER_PYTHON:-python3}" "$root/tools/fuzz_seeds.py" "$out/control_protocol" "$out/image_decode" ;;
  safetensors|export_archive)
    mkdir -p "$out/$corpus" && cp "$root/fuzz/seeds/$corpus/"* "$out/$corpus/" ;;
  *)  # the target writes its own seeds (rings and checkpoints made by Stoker's writers)
    mkdir -p "$out/$corpus" && STOKER_FUZZ_WRITE_SEEDS="$out/$corpus" "$fuzzer" ;;
esac
seeds=$(ls "$out/$corpus" | wc -l)
[[ "$seeds" -gt 0 ]] || { echo "FAIL: no seeds in $out/$corpus"; exit 1; }
result=$("$fuzzer" "$out/$corpus") || { echo "FAIL: $fuzzer exited $? on the $corpus seeds"; exit 1; }
echo "$result"
[[ "$result" == "ran $seeds inputs" ]] || { echo "FAIL: expected to run $seeds inputs"; exit 1; }
echo "PASS: $seeds $corpus seeds"
