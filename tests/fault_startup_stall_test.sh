#!/usr/bin/env bash
# A rank that never reaches a start-up phase (Note [Start-up and teardown deadlines] in
# launcher/rank/phase_deadline.h): rank 1 of three sleeps before the MPI rank-setup collectives,
# then (second case) before the node data services' first collective. The other ranks give
# up after the start-up deadline (3 s here), each naming the phase and rank 1, and exit 124;
# mpirun ends the job, the stalled rank included. Bound: within 30 s; no process left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
program="$root/launcher/startup_stall"

for phase in rank_setup node_data_service; do
  case "$phase" in
    rank_setup) name="MPI rank setup" ;;
    node_data_service) name="node data services: the job id" ;;
  esac
  echo "== rank 1 does not reach the phase \"$name\""
  start=$SECONDS
  code=0
  timeout --signal=KILL 60 mpirun -np 3 "$program" --stall_rank=1 --stall_phase="$phase" \
    --timeout_s=3 > "$out/$phase.log" 2>&1 || code=$?
  took=$((SECONDS - start))
  cat "$out/$phase.log"
  echo "mpirun exited with code $code after $took s"
  [[ "$code" -eq 124 ]] || { echo "FAIL: expected exit code 124 (a start-up deadline), got $code"; exit 1; }
  [[ "$took" -le 30 ]] || { echo "FAIL: the job took more than 30 s to end"; exit 1; }
  grep -q "rank 1 stalls before the phase" "$out/$phase.log" || { echo "FAIL: rank 1 did not stall"; exit 1; }
  # Ranks 0 and 2 both say it (rank 0 saw who was missing and told rank 2).
  named=$(grep -c "timeout (exit 124): .*start-up phase \"$name\" was not reached by rank 1 of 3 within 3s" "$out/$phase.log" || true)
  [[ "$named" -eq 2 ]] || { echo "FAIL: $named rank(s), not 2, named the phase and the missing rank"; exit 1; }
  if grep -q "passed the start-up" "$out/$phase.log"; then echo "FAIL: a rank passed the phase"; exit 1; fi
  sleep 0.5
  if pgrep -f -- "$program" > /dev/null; then
    pgrep -af -- "$program"; pkill -KILL -f -- "$program" || true
    echo "FAIL: processes left"; exit 1
  fi
done
echo "PASS"
