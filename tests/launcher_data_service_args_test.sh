#!/usr/bin/env bash
# The launcher's --data_service_args, end to end (launcher, data service, trainer on the
# CPU), over an image folder of JPEGs with one corrupt JPEG:
#  - by default (--bad_files=skip) the job completes, warning once about the corrupt file;
#    --data_service_args=--threads=2 wins over the launcher's own --data_threads=1;
#  - --data_service_args=--bad_files=fail reaches the data service: the job fails, naming
#    the corrupt file;
#  - the same in the hosts mode, where the flags travel in the trainers' --data_service_args
#    to the data service that the node's local rank 0 starts;
#  - a malformed value exits 2 at once, naming --data_service_args, and starts nothing.
# Every job leaves nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# Classes a and b, 12 samples each (a's last one corrupt): 6 full batches of 4, 3 per rank
# with 2 ranks, so that every sample (the corrupt one too) is loaded.
data="$out/jpegs"
make_jpeg_classes "$data" 24 60 11 12
# A JPEG header, then garbage: a real start of image that cannot be decoded.
{ head -c 200 "$data/b/0000.jpg"; head -c 400 /dev/urandom; } > "$data/a/corrupt.jpg"

run() {  # run NAME [launcher flags...] -- [trainer flags...]; sets $rc, log in $out/NAME.log
  local name="$1"; shift
  local job="dsargs-$name-$$-$RANDOM"
  set +e
  timeout --signal=KILL 240 "$root/launcher/launcher" --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=imagefolder --train_dir="$data" --data_threads=1 "$@" \
    --model=small_cnn --num_classes=2 --image_size=16 --batch_size=4 --lr=0.05 --epochs=1 \
    --log_every=1 --loss_log="$out/$name.loss" > "$out/$name.log" 2>&1
  rc=$?
  set -e
  echo "$name: exit $rc"
  assert_nothing_left "$job"
}

fail() { cat "$out/$1.log"; echo "FAIL: $1: $2"; exit 1; }

# ---- Default: the corrupt file is replaced, and the job completes.
run skip --np=1 --data_service_args="--threads=2" --
[[ $rc -eq 0 ]] || fail skip "should complete, got exit $rc"
n=$(grep -c "unusable .*/a/corrupt.jpg" "$out/skip.log" || true)
[[ $n -eq 1 ]] || fail skip "corrupt.jpg warned about $n times, want once"
grep -q "starting the data service: .* --threads=1 --threads=2\$" "$out/skip.log" ||
  fail skip "the data service's command line does not end with the launcher's flags, then ours"
grep -q "2 decode threads.*--bad_files=skip" "$out/skip.log" ||
  fail skip "the data service did not take --threads=2 (the user's value) with --bad_files=skip"
[[ $(wc -l < "$out/skip.loss") -eq 6 ]] || fail skip "expected 6 steps, got $(wc -l < "$out/skip.loss")"

# ---- --bad_files=fail through the launcher: the job fails, naming the file.
run fail_local --np=1 --data_service_args="--bad_files=fail" --
[[ $rc -ne 0 && $rc -ne 137 ]] || fail fail_local "should fail (not time out), got exit $rc"
grep -q "starting the data service: .* --threads=1 --bad_files=fail\$" "$out/fail_local.log" ||
  fail fail_local "the data service's command line does not end with --bad_files=fail"
grep -q "listening on .*--bad_files=fail" "$out/fail_local.log" ||
  fail fail_local "the data service does not say it runs with --bad_files=fail"
grep -E -q "$data/a/corrupt\.jpg.*\(--bad_files=fail; --bad_files=skip would replace the sample\)" \
  "$out/fail_local.log" || fail fail_local "no error names $data/a/corrupt.jpg"
grep -q "job dsargs-fail_local-.* failed" "$out/fail_local.log" || fail fail_local "the launcher did not report the failure"
echo "fail_local: $(grep -E -m 1 "corrupt\.jpg.*--bad_files=fail;" "$out/fail_local.log" | cut -c1-300)"

# ---- The hosts mode: the node's local rank 0 starts the data service with the flags.
run fail_hosts --hosts=localhost:2 --data_service_args="--bad_files=fail" --
[[ $rc -ne 0 && $rc -ne 137 ]] || fail fail_hosts "should fail (not time out), got exit $rc"
grep -q "'--data_service_args=--dataset=imagefolder --train_dir=$data --threads=1 --bad_files=fail'" \
  "$out/fail_hosts.log" || fail fail_hosts "the trainers' --data_service_args do not end with --bad_files=fail"
grep -E -q "$data/a/corrupt\.jpg.*\(--bad_files=fail; --bad_files=skip would replace the sample\)" \
  "$out/fail_hosts.log" || fail fail_hosts "no error names $data/a/corrupt.jpg"

# ---- A malformed value: exit 2 before anything starts, naming the flag.
run malformed --np=1 --data_service_args="--bad_files fail" --
[[ $rc -eq 2 ]] || fail malformed "want exit 2, got $rc"
grep -q -- "launcher: --data_service_args: '--bad_files' is not a flag with a value" "$out/malformed.log" ||
  fail malformed "the message does not name --data_service_args and the word"
! grep -q "starting the data service" "$out/malformed.log" || fail malformed "a data service was started"
echo "PASS"
