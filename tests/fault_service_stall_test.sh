#!/usr/bin/env bash
# A stuck data service (process faults): SIGSTOP of the data service mid-epoch. It keeps
# its socket open, so nobody sees it die; the ranks see no batch within --data_timeout_s
# (5 s here), name the data service as stuck (Note [A stuck data service] in
# trainer/run_input.cc) and exit 69 (a peer lost: common/exit_codes.h), not 124.
#  1. under the launcher: mpirun exits 69; the launcher stops the data service with SIGTERM
#     and SIGCONT (launcher/rank/child_process.h), on which it removes its socket and
#     segments itself, and exits 69;
#  2. under a bare mpirun (local rank 0 started the data service): the same, local rank 0
#     stopping it.
# Bound: each job ends within --data_timeout_s + 10 s of the SIGSTOP; nothing of it is left
# (no process, no /dev/shm segment, no socket or job directory).
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
data_timeout_s=5

# expect_stuck_service_failure PID: PID (the job) exits 69 within data_timeout_s + 10 s,
# its first error line naming the stuck data service; the data service, continued, shut
# down on SIGTERM.
expect_stuck_service_failure() {
  local pid="$1" start=$SECONDS code=0 took
  wait "$pid" || code=$?
  took=$((SECONDS - start))
  echo "the job exited with code $code $took s after the SIGSTOP"
  [[ "$took" -le $((data_timeout_s + 10)) ]] ||
    { cat "$log"; echo "FAIL: the job took more than $((data_timeout_s + 10)) s to end"; exit 1; }
  [[ "$took" -ge $((data_timeout_s - 1)) ]] ||
    { cat "$log"; echo "FAIL: the job ended before --data_timeout_s"; exit 1; }
  expect_exit "$log" 69 "$code" \
    "^\[trainer rank [01] [^]]*\] E peer lost \(exit 69\): DEADLINE_EXCEEDED: the data service at /tmp/stoker\.$job/[a-z0-9.]+ is stuck \(stopped or hung; --data_timeout_s\): .*no batch from the data service within 5s" ||
    exit 1
  grep -q "\[data_service node 0 .*SIGTERM: shutting down" "$log" ||
    { cat "$log"; echo "FAIL: the stopped data service did not shut down on SIGTERM"; exit 1; }
}

echo "== 1: under the launcher"
launch_training_job service-stopped --data_timeout_s="$data_timeout_s"
service_pid=$(pgrep -f -- "data_service/data_service .*--job_id=$job" | head -n 1)
[[ -n "$service_pid" ]] || { kill -TERM "$launcher_pid"; cat "$log"; echo "FAIL: no data service pid"; exit 1; }
rank_pids=$(pid_records "$log" role=rank world_size=2 split=training | sort -u | tr '\n' ' ')
echo "stopping the data service (pid $service_pid); ranks: $rank_pids"
kill -STOP "$service_pid"
expect_stuck_service_failure "$launcher_pid"
grep -q "job $job failed: mpirun (pid [0-9]*)" "$log" || { cat "$log"; echo "FAIL: the launcher did not report mpirun's failure"; exit 1; }
# shellcheck disable=SC2086
assert_nothing_left "$job" "$service_pid" $rank_pids

echo "== 2: under a bare mpirun"
launch_bare_training_job bare-service-stopped 180 4096 900 --data_timeout_s="$data_timeout_s"
rank_pids=$(pid_records "$log" role=rank world_size=2 split=training | sort -u | tr '\n' ' ')
[[ -n "$service_pid" ]] || { kill -TERM "$mpirun_pid"; cat "$log"; echo "FAIL: no data service pid"; exit 1; }
echo "stopping the data service (pid $service_pid); ranks: $rank_pids"
kill -STOP "$service_pid"
expect_stuck_service_failure "$mpirun_pid"
# shellcheck disable=SC2086
assert_nothing_left "$job" "$service_pid" $rank_pids
echo "PASS"
