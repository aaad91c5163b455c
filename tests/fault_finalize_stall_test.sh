#!/usr/bin/env bash
# A rank that stalls after the last collective, before MPI_Finalize (Note [Bounded
# MPI_Finalize] in launcher/rank/rank_setup.h): rank 1 of two stops itself (SIGSTOP); rank 0,
# waiting in MPI_Finalize, gives up after the finalize timeout (3 s here), names it and
# exits 1, and mpirun ends the job, the stopped rank included. Bound: within 30 s; no
# process left. Without the bound the job would wait for ever.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
program="$root/launcher/finalize_stall"

start=$SECONDS
code=0
timeout --signal=KILL 60 mpirun -np 2 "$program" --stall_rank=1 --finalize_timeout_s=3 \
  > "$out/log" 2>&1 || code=$?
took=$((SECONDS - start))
cat "$out/log"
echo "mpirun exited with code $code after $took s"
[[ "$code" -ne 0 && "$code" -ne 137 ]] || { echo "FAIL: expected mpirun to fail on its own (137: killed by the test's timeout)"; exit 1; }
[[ "$took" -le 30 ]] || { echo "FAIL: the job took more than 30 s to end"; exit 1; }
grep -q "rank 1 at the end of the job" "$out/log" || { echo "FAIL: rank 1 did not reach the end"; exit 1; }
grep -q "MPI_Finalize did not return within 3s: another rank stalled or died at the end of the job" "$out/log" ||
  { echo "FAIL: rank 0 did not report the stalled MPI_Finalize"; exit 1; }
sleep 0.5
if pgrep -f -- "$program" > /dev/null; then
  pgrep -af -- "$program"; pkill -KILL -f -- "$program" || true
  echo "FAIL: processes left"; exit 1
fi
echo "PASS"
