#!/usr/bin/env bash
# --gpu_decode_share on the CPU, end to end (launcher, data service, trainer), over an image
# folder of baseline JPEGs that the data service can defer:
#  - with every default (the service's auto follows the trainer, whose auto asks for 0 on
#    the CPU) the job trains, gets no deferred samples and reports the share as off (its
#    progress lines show none);
#  - a data service with a fixed --gpu_decode_share=1 does defer them, and the CPU trainer
#    refuses them, naming the flag (so the first case is not vacuous);
#  - a share above 0 fixed for a CPU trainer, and malformed values on either side, are
#    refused, naming the flag.
# Every job leaves nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# Classes a and b, 12 baseline JPEGs each (40 x 40: they fit a 48 x 48 sample's place).
data="$out/jpegs"
make_jpeg_classes "$data" 40 16 12 12

run() {  # run NAME [launcher flags...] -- [trainer flags...]; sets $rc, log in $out/NAME.log
  local name="$1"; shift
  local job="gpushare-$name-$$-$RANDOM"
  set +e
  timeout --signal=KILL 240 "$root/launcher/launcher" --job_id="$job" --np=1 \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=imagefolder --train_dir="$data" --data_threads=1 "$@" \
    --model=small_cnn --num_classes=2 --image_size=48 --batch_size=4 --lr=0.05 --epochs=2 \
    --log_every=1 --loss_log="$out/$name.loss" --metrics_out="$out/$name.json" \
    > "$out/$name.log" 2>&1
  rc=$?
  set -e
  echo "$name: exit $rc"
  assert_nothing_left "$job"
}

fail() { cat "$out/$1.log"; echo "FAIL: $1: $2"; exit 1; }

# ---- Every default: trains, share off.
run default --
[[ $rc -eq 0 ]] || fail default "should complete, got exit $rc"
[[ $(wc -l < "$out/default.loss") -eq 12 ]] || fail default "expected 12 steps, got $(wc -l < "$out/default.loss")"
grep -q "GPU decode share 0.000 (off)" "$out/default.log" || fail default "the summary does not report the share as off"
grep -q "epoch 2/2  step 6/6" "$out/default.log" || fail default "no progress line"
! grep -q "gpu-decode" "$out/default.log" || fail default "the progress line shows a GPU decode share on the CPU"
"$python" - "$out/default.json" <<'PY' || fail default "--metrics_out does not say share 0, off"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["gpu_decode_share"] == 0 and m["gpu_decode_mode"] == "off", m
PY

# ---- The data service fixes a share: the CPU trainer refuses the deferred samples.
run service_fixed --data_service_args=--gpu_decode_share=1 --
[[ $rc -ne 0 && $rc -ne 137 ]] || fail service_fixed "should fail (not time out), got exit $rc"
grep -q "the ring holds deferred samples.*--gpu_decode_share=auto" "$out/service_fixed.log" ||
  fail service_fixed "the CPU trainer did not refuse the deferred samples, naming the flag"

# ---- A share above 0 fixed for a CPU trainer: exit 2, naming the flag.
run trainer_fixed -- --device=cpu --gpu_decode_share=0.5
[[ $rc -eq 2 ]] || fail trainer_fixed "want exit 2, got $rc"
grep -q -- "--gpu_decode_share=0.5: this rank trains on the CPU" "$out/trainer_fixed.log" ||
  fail trainer_fixed "the message does not name --gpu_decode_share=0.5"

# ---- Malformed values on either side.
run trainer_bad -- --gpu_decode_share=most
[[ $rc -eq 2 ]] || fail trainer_bad "want exit 2, got $rc"
grep -q -- "--gpu_decode_share=most: must be auto" "$out/trainer_bad.log" ||
  fail trainer_bad "the message does not name --gpu_decode_share"
run service_bad --data_service_args=--gpu_decode_share=most --
[[ $rc -ne 0 && $rc -ne 137 ]] || fail service_bad "should fail, got exit $rc"
grep -q -- "--gpu_decode_share=most: must be auto" "$out/service_bad.log" ||
  fail service_bad "the data service's message does not name --gpu_decode_share"
echo "PASS"
