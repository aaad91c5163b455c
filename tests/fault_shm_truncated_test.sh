#!/usr/bin/env bash
# A ring segment truncated under a running job (another process of the same user shrinks
# /dev/shm/stoker.<job>.ring.0): the first process that touches a page past the new end
# (rank 0 or the data service) does not die of a bare SIGBUS but logs
# "shared memory truncated: /stoker.<job>.ring.0 was mapped with N bytes, but byte M ..."
# and exits (Note [Truncated shared memory] in common/shm_segment.h); the job fails.
# Bound: it ends within 60 s of the truncation, and nothing of it is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
job="shmtrunc-$$-$RANDOM"
log="$out/job.log"
timeout --signal=KILL 180 "$root/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=4096 --synthetic_classes=4 --data_threads=1 -- \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=1000 \
  --log_every=1 --loss_log="$log.loss" > "$log" 2>&1 &
launcher_pid=$!
await_training "$log" "$launcher_pid"
truncate -s 4096 "/dev/shm/stoker.$job.ring.0"
start=$SECONDS
code=0
wait "$launcher_pid" || code=$?
echo "the job exited with code $code $((SECONDS - start)) s after the truncation"
[[ "$code" -ne 0 && "$code" -ne 137 ]] || { cat "$log"; echo "FAIL: expected the job to fail by itself"; exit 1; }
[[ $((SECONDS - start)) -le 60 ]] || { cat "$log"; echo "FAIL: the job took more than 60 s to end"; exit 1; }
grep -E "^\[(trainer rank 0|data_service node 0)\] E failure \(exit 1\): shared memory truncated: /stoker\.$job\.ring\.0 was mapped with [0-9]+ bytes, but byte [0-9]+ is past the end" "$log" ||
  { cat "$log"; echo "FAIL: no process named the truncated segment"; exit 1; }
if grep -q "Bus error\|signal 7 (SIGBUS)\|exited on signal 7" "$log"; then
  cat "$log"; echo "FAIL: a process died of SIGBUS"; exit 1
fi
assert_nothing_left "$job"
echo "PASS"
