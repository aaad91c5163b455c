#!/usr/bin/env bash
# A stalled rank (process faults): SIGSTOP of rank 1 of a 3-rank CPU job under the
# launcher. The other ranks' collective watchdogs (--collective_timeout_s=10) see their
# allreduce not complete, log which collective it is, that rank 1 has not reached it and
# stopped beating (stalled), and the last collective each rank completed, and exit non-zero;
# mpirun ends the job (the stopped rank too) and the launcher exits non-zero. Bound: the job
# ends within 20 s of the SIGSTOP (the 10 s timeout + 10 s), and nothing of it is left.
# Then the same over two "nodes" (--ranks_per_node=2 under a bare mpirun): rank 2, on the
# stopped rank 3's node, names it; the report says how many ranks are on other nodes.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
job="stall-$$-$RANDOM"
log="$out/stall.log"

stall_launcher_job "$log" "$out/loss" 3 3 1 180 \
  --dataset=synthetic --synthetic_samples=4096 --synthetic_classes=4 --data_threads=1 -- \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=1000 || exit 1

# The waiting ranks name the stalled rank and the last collective each rank completed.
check_stall_report "$log" \
  "collective watchdog: collective #[0-9]* (allreduce) on the MPI communicator has not completed" \
  1 0 0 1 2 || exit 1
grep -q "\[trainer rank [02] .*collective watchdog: a blocked MPI collective cannot be interrupted: exiting with code 124" "$log" ||
  { cat "$log"; echo "FAIL: no waiting rank exited through the watchdog"; exit 1; }
grep -q "job $job failed" "$log" || { cat "$log"; echo "FAIL: the launcher did not report the failure"; exit 1; }
# A collective timeout is exit code 124 (common/exit_codes.h) all the way to the launcher.
[[ "$stall_code" -eq 124 ]] || { cat "$log"; echo "FAIL: the job exited $stall_code, expected 124"; exit 1; }

# shellcheck disable=SC2086
assert_nothing_left "$job" $rank_pids

echo "== two nodes (bare mpirun, --ranks_per_node=2): SIGSTOP of rank 3, on node 1"
# Only node 1's ranks can see rank 3; node 0's wait a little longer (Note [Culprit's node
# reports first]), so node 1's rank 2 reports it. Same bound.
job="stall2-$$-$RANDOM"
log="$out/stall2.log"
rm -f "$out/loss2"
stall_rank "$log" "$out/loss2" 3 4 3 10 -- \
  timeout --signal=KILL 180 mpirun -np 4 "$root/trainer/trainer" --ranks_per_node=2 --job_id="$job" \
  --data_service="$root/data_service/data_service" \
  --data_service_args="--dataset=synthetic --synthetic_samples=4096 --synthetic_classes=4 --threads=1" \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=8 --epochs=1000 \
  --log_every=1 --loss_log="$out/loss2" --collective_timeout_s=10 --data_timeout_s=9 --collective_abort_grace_s=5 ||
  exit 1
check_stall_report "$log" "\[trainer rank 2 .*collective watchdog: collective #[0-9]* (allreduce)" \
  3 1 2 3 || exit 1
grep -q "2 of 4 ranks are on other nodes" <<< "$report" || { cat "$log"; echo "FAIL: the report does not say what it cannot see"; exit 1; }
# The nodes' data services (children of the ranks 0 and 2, not of mpirun) get SIGTERM when
# their rank dies and remove their segments on the way out: within 15 s of mpirun's exit.
service_pids=$(pid_records "$log" role=data_service | tr '\n' ' ')
for _ in $(seq 150); do
  alive=""
  for pid in $service_pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
  [[ -z "$alive" ]] && break
  sleep 0.1
done
[[ -z "$alive" ]] || { cat "$log"; echo "FAIL: data services$alive still running 15 s after mpirun's exit"; exit 1; }
# shellcheck disable=SC2086
assert_nothing_left "$job" $rank_pids $service_pids ||
  { grep "data_service\|data service" "$log"; echo "data services: $service_pids"; exit 1; }
echo "PASS"
