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
launch_training_job shmtrunc
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
