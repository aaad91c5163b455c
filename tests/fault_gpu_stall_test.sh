#!/usr/bin/env bash
# A stalled rank on GPUs (tag gpu: runs where 2 GPUs are visible; skips itself otherwise):
# SIGSTOP of rank 1 of a 2-GPU job under the launcher. Rank 0's collective watchdog
# (--collective_timeout_s=10) reports the stuck collective (an NCCL gradient allreduce, or
# the MPI stop vote), names rank 1 as stalled, aborts the NCCL communicator
# (ncclCommAbort) and ends; the job ends within 60 s with a non-zero code and nothing of
# it is left.
set -euo pipefail
root="${TEST_SRCDIR}/stoker"
source "$root/tests/mpi_env.sh"
source "$root/tests/job_checks.sh"
private_mpi_session_dir
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
if [[ "$gpus" -lt 2 ]]; then echo "SKIP: needs 2 GPUs (found ${gpus:-0})"; exit 0; fi
out="${TEST_TMPDIR:-$(mktemp -d)}"
job="gpustall-$$-$RANDOM"
log="$out/gpu_stall.log"

timeout --signal=KILL 240 "$root/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=65536 --synthetic_classes=10 --data_threads=4 -- \
  --device=cuda --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 --epochs=100 \
  --log_every=1 --loss_log="$out/loss" --collective_timeout_s=10 --collective_abort_grace_s=5 \
  > "$log" 2>&1 &
launcher_pid=$!
for _ in $(seq 1200); do
  [[ -f "$out/loss" && $(wc -l < "$out/loss") -ge 5 ]] && break
  kill -0 "$launcher_pid" 2>/dev/null || { cat "$log"; echo "FAIL: the job ended early"; exit 1; }
  sleep 0.1
done
[[ -f "$out/loss" && $(wc -l < "$out/loss") -ge 5 ]] || { kill -TERM "$launcher_pid"; cat "$log"; echo "FAIL: training did not start"; exit 1; }
rank1_pid=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)): ring.*training split/\1/p' "$log" | head -n 1)
rank_pids=$(sed -n 's/.*rank [0-9] of 2 (pid \([0-9]*\)): ring.*training split/\1/p' "$log" | sort -u | tr '\n' ' ')
[[ -n "$rank1_pid" ]] || { kill -TERM "$launcher_pid"; cat "$log"; echo "FAIL: no pid for rank 1"; exit 1; }
echo "job $job: stopping rank 1 (pid $rank1_pid); ranks: $rank_pids"

kill -STOP "$rank1_pid"
start=$SECONDS
code=0
wait "$launcher_pid" || code=$?
elapsed=$((SECONDS - start))
echo "the launcher exited with code $code $elapsed s after the SIGSTOP"
[[ "$code" -ne 0 ]] || { cat "$log"; echo "FAIL: the job exited 0"; exit 1; }
[[ "$elapsed" -le 60 ]] || { cat "$log"; echo "FAIL: the job took more than 60 s to end"; exit 1; }
report=$(grep "\[trainer rank 0 .*collective watchdog: collective #[0-9]* (allreduce) on the \(NCCL\|MPI\) communicator" "$log" | head -n 1 || true)
[[ -n "$report" ]] || { cat "$log"; echo "FAIL: no watchdog report from rank 0"; exit 1; }
echo "$report"
grep -q "rank 1 (pid $rank1_pid): stalled: no heartbeat for" <<< "$report" ||
  { cat "$log"; echo "FAIL: the report does not name rank 1 as stalled"; exit 1; }
grep -q "Last collective each rank of node 0 completed: rank 0 #[0-9]* (allreduce).*; rank 1 #[0-9]* (allreduce)" <<< "$report" ||
  { cat "$log"; echo "FAIL: the report does not give each rank's last collective"; exit 1; }
# shellcheck disable=SC2086
assert_nothing_left "$job" $rank_pids
echo "PASS"
