#!/usr/bin/env bash
# Processes killed mid-epoch under the launcher (process faults):
# Cases 1 to 3 end with exit code 69 (a peer lost, common/exit_codes.h); in 1 and 3 the
# job's first error line names the process that was lost.
#  1. kill -9 of the data service: the launcher stops mpirun (whose ranks exit) and exits
#     non-zero naming the data service;
#  2. kill -9 of trainer rank 1: mpirun ends the other ranks and names rank 1, the launcher
#     stops the data service and exits non-zero;
#  3. kill -9 of the data service under a bare mpirun: the ranks find it gone, local rank 0
#     removes the segments it left, and mpirun exits non-zero;
#  4. kill -9 of local rank 0 and its data service together under a bare mpirun: nobody is
#     left to clean up, so the job's owner record (local rank 0's) stays with its files, and
#     the next bare-mpirun job on the machine removes them, naming the dead job.
# Bound: each job ends within 10 s of the kill; nothing of it is left (no process, no
# /dev/shm segment, no socket or job directory; in case 4 once the next job has run). The
# kill of rank 0 alone and the stop of the data service under a bare mpirun are in
# node_service_failure_test; the stall of a rank in fault_stall_test; the kill of the
# launcher in fault_launcher_kill_test; the stop (SIGSTOP) of the data service in
# fault_service_stall_test.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# find_rank_pids: sets rank_pid (rank r's pid is rank_pid[r]) from the pid records in $log;
# fails, stopping the job, unless service_pid and both ranks' pids are known.
find_rank_pids() {
  rank_pid=()
  for r in 0 1; do
    rank_pid[r]=$(pid_records "$log" role=rank rank="$r" world_size=2 split=training | head -n 1)
  done
  [[ -n "$service_pid" && -n "${rank_pid[0]}" && -n "${rank_pid[1]}" ]] ||
    { kill -TERM "$launcher_pid"; cat "$log"; echo "FAIL: pids not found"; exit 1; }
}

# start_job NAME: starts a long 2-rank job in the background; sets job, log, launcher_pid,
# service_pid and rank_pids (rank r's pid is rank_pid[r]) once training is under way.
start_job() {
  launch_training_job "$1"
  service_pid=$(pgrep -f -- "data_service/data_service .*--job_id=$job" | head -n 1)
  find_rank_pids
  echo "job $job: launcher $launcher_pid, data service $service_pid, ranks ${rank_pid[*]}"
}

# expect_failure LIMIT [CODE PATTERN]: the launcher must exit non-zero within LIMIT seconds;
# with CODE, exactly with CODE (common/exit_codes.h) and a first error line matching PATTERN.
expect_failure() {
  local limit="$1" start=$SECONDS code=0
  wait "$launcher_pid" || code=$?
  echo "the launcher exited with code $code after $((SECONDS - start)) s"
  code_of_last_job=$code
  [[ "$code" -ne 0 ]] || { cat "$log"; echo "FAIL: the job exited 0"; exit 1; }
  [[ $((SECONDS - start)) -le "$limit" ]] || { cat "$log"; echo "FAIL: the job took more than $limit s to end"; exit 1; }
  if [[ $# -ge 3 ]]; then expect_exit "$log" "$2" "$code" "$3" || exit 1; fi
}

echo "== 1: kill -9 of the data service"
start_job service-killed
kill -KILL "$service_pid"
expect_failure 10 69 "\] E peer lost \(exit 69\): data service \(pid $service_pid\) killed by signal 9"
grep -q "job $job failed: data service (pid $service_pid) killed by signal 9" "$log" ||
  { cat "$log"; echo "FAIL: the launcher did not name the data service"; exit 1; }
assert_nothing_left "$job" "$service_pid" "${rank_pid[@]}"

echo "== 2: kill -9 of rank 1"
start_job rank1-killed
kill -KILL "${rank_pid[1]}"
# A rank killed by a signal it does not stop on is a lost peer (69), not a resumable stop.
expect_failure 10
[[ "$code_of_last_job" -eq 69 ]] || { cat "$log"; echo "FAIL: exit code $code_of_last_job, expected 69"; exit 1; }
# mpirun names the rank (the PID it prints is 0 inside a pid namespace).
grep -q "process rank 1 with PID [0-9]* .*exited on signal 9" "$log" ||
  { cat "$log"; echo "FAIL: mpirun did not name rank 1"; exit 1; }
grep -q "job $job failed: mpirun (pid [0-9]*)" "$log" || { cat "$log"; echo "FAIL: the launcher did not report mpirun's failure"; exit 1; }
assert_nothing_left "$job" "$service_pid" "${rank_pid[@]}"

# start_bare_job NAME: a long 2-rank `mpirun trainer` job (no launcher: local rank 0 starts
# the data service) in the background; sets job, log, launcher_pid (mpirun's), service_pid
# and rank_pid once training is under way.
start_bare_job() {
  launch_bare_training_job "$1" 180 4096 900
  launcher_pid=$mpirun_pid
  find_rank_pids
  echo "job $job: data service $service_pid, ranks ${rank_pid[*]}"
  [[ -n "$(ls /dev/shm | grep -F "stoker.$job." || true)" ]] || { echo "FAIL: no segments while training"; exit 1; }
}

echo "== 3: kill -9 of the data service under a bare mpirun (local rank 0 started it)"
# It cannot remove its segments and socket: local rank 0 does, and mpirun ends the job.
start_bare_job bare-service-killed
[[ -f "/tmp/stoker.$job.owner" ]] || { cat "$log"; echo "FAIL: local rank 0 holds no owner record"; exit 1; }
kill -KILL "$service_pid"
expect_failure 10 69 "^\[trainer rank [01] [^]]*\] E peer lost \(exit 69\): UNAVAILABLE: the data service at .* is gone"
grep -q "UNAVAILABLE: the data service at .* is gone" "$log" || { cat "$log"; echo "FAIL: no rank reported the data service gone"; exit 1; }
grep -q "removed leftover /dev/shm/stoker.$job.ring.0" "$log" || { cat "$log"; echo "FAIL: local rank 0 did not remove the segments"; exit 1; }
assert_nothing_left "$job" "$service_pid" "${rank_pid[@]}"

echo "== 4: kill -9 of local rank 0 and its data service together under a bare mpirun"
start_bare_job bare-owner-killed
dead="$job" dead_log="$log" dead_owner="${rank_pid[0]}" dead_pids=("$service_pid" "${rank_pid[@]}")
kill -KILL "${rank_pid[0]}" "$service_pid"
expect_failure 10
left=$(ls /dev/shm | grep -F "stoker.$dead." || true)
[[ -n "$left" && -f "/tmp/stoker.$dead.owner" ]] ||
  { cat "$dead_log"; echo "FAIL: expected the dead job's segments and owner record to stay, found: $left"; exit 1; }
[[ -S "/tmp/stoker.$dead/node0.sock" ]] ||
  { cat "$dead_log"; echo "FAIL: expected the dead job's socket /tmp/stoker.$dead/node0.sock to stay"; exit 1; }
[[ "$(stat -c '%a %u' "/tmp/stoker.$dead")" == "700 $(id -u)" ]] ||
  { echo "FAIL: the dead job's directory: $(stat -c '%a %u' "/tmp/stoker.$dead")"; exit 1; }
echo "left by the dead job: $left /tmp/stoker.$dead/node0.sock /tmp/stoker.$dead.owner"
# The next bare job on the machine: its local rank 0 removes them before it starts.
next="bare-next-$$-$RANDOM"
timeout --signal=KILL 180 mpirun -np 2 "$root/trainer/trainer" --job_id="$next" \
  --data_service="$root/data_service/data_service" \
  --data_service_args="--dataset=synthetic --synthetic_samples=256 --synthetic_classes=4 --threads=1" \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=1 \
  > "$out/next.log" 2>&1 || { cat "$out/next.log"; echo "FAIL: the next job failed"; exit 1; }
grep -q "node 0: removed /dev/shm/stoker.$dead.ring.0 of the dead job $dead (its owner, pid $dead_owner, is gone)" "$out/next.log" ||
  { cat "$out/next.log"; echo "FAIL: the next job did not remove the dead job's segments"; exit 1; }
for path in "/tmp/stoker.$dead/node0.sock" "/tmp/stoker.$dead"; do
  grep -q "node 0: removed $path of the dead job $dead (its owner, pid $dead_owner, is gone)" "$out/next.log" ||
    { cat "$out/next.log"; echo "FAIL: the next job did not remove $path"; exit 1; }
done
assert_nothing_left "$dead" "${dead_pids[@]}"
assert_nothing_left "$next"
echo "PASS"
