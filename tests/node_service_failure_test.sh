#!/usr/bin/env bash
# Death detection between a node's data service and the rank that started it (bare mpirun,
# Note [Data service per node]):
#  1. local rank 0 killed with SIGKILL mid-training: its data service gets SIGTERM
#     (PR_SET_PDEATHSIG), removes its socket and segments and exits; mpirun ends the job
#     with a non-zero code;
#  2. the data service stopped mid-training: the ranks get Unavailable from their rings and
#     the job ends with a non-zero code naming the data service.
# Either way within 10 s, and nothing of the job is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# Starts a long job in the background; sets job, log, mpirun_pid, service_pid, rank0_pid
# once training is under way.
start_job() {
  # Under way once rank 0 has logged the loss of two steps.
  launch_bare_training_job "$1" 120 256 600 --data_timeout_s=60
  rank0_pid=$(ps -o ppid= -p "$service_pid" | tr -d ' ')
  echo "job $job: data service pid $service_pid, started by local rank 0 (pid $rank0_pid)"
}

# Waits for mpirun; it must fail within `limit` seconds.
expect_job_failure() {
  local limit="$1" start=$SECONDS code=0
  wait "$mpirun_pid" || code=$?
  echo "mpirun exited with code $code after $((SECONDS - start)) s"
  [[ "$code" -ne 0 ]] || { cat "$log"; echo "FAIL: the job exited 0"; exit 1; }
  [[ $((SECONDS - start)) -le "$limit" ]] || { echo "FAIL: the job took too long to end"; exit 1; }
}

echo "== 1: local rank 0 dies"
start_job rank0-dies
kill -KILL "$rank0_pid"
expect_job_failure 10
grep -q "\[data_service node 0 .*SIGTERM: shutting down" "$log" ||
  { cat "$log"; echo "FAIL: the data service did not get SIGTERM when its rank died"; exit 1; }
assert_nothing_left "$job" "$service_pid" "$rank0_pid"

echo "== 2: the data service stops"
start_job service-stops
kill -TERM "$service_pid"
expect_job_failure 10
grep -q "UNAVAILABLE: the data service at .* is gone" "$log" || { cat "$log"; echo "FAIL: no rank reported the data service gone"; exit 1; }
assert_nothing_left "$job" "$service_pid" "$rank0_pid"
echo "PASS"
