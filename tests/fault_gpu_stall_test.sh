#!/usr/bin/env bash
# Process faults on GPUs (tag gpu: runs where 2 GPUs are visible). Without 2 GPUs it prints
# SKIP and exits 77, so that it fails under `bazel test` instead of passing without
# running, and tools/gpu_checks.sh counts it as skipped.
#  1. a stalled rank: SIGSTOP of rank 1 of a 2-GPU job under the launcher. Rank 0's
#     collective watchdog (--collective_timeout_s=10) reports the stuck collective (an
#     NCCL gradient allreduce, or the MPI stop vote), names rank 1 as stalled, aborts the
#     NCCL communicator (ncclCommAbort) and ends; the job ends within 20 s (the timeout
#     + 10 s) with a non-zero code;
#  2. a killed rank: kill -9 of rank 1 of a 2-GPU job: mpirun ends rank 0, and the job
#     exits 69 (a peer lost) within 10 s.
# After each, nothing of the job is left and no GPU memory is held (every GPU's memory in
# use back to what it was before the job, nvidia-smi, within 10 s).
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
if [[ "$gpus" -lt 2 ]]; then echo "SKIP: needs 2 GPUs (found ${gpus:-0}): not run"; exit 77; fi
trainer_flags=(--device=cuda --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 --epochs=100)

echo "== 1: SIGSTOP of rank 1"
job="gpustall-$$-$RANDOM"
log="$out/gpu_stall.log"
before=$(gpu_memory_used)
stall_launcher_job "$log" "$out/loss" 5 2 1 240 \
  --dataset=synthetic --synthetic_samples=65536 --synthetic_classes=10 --data_threads=4 -- \
  "${trainer_flags[@]}" ||
  exit 1
check_stall_report "$log" \
  "\[trainer rank 0 .*collective watchdog: collective #[0-9]* (allreduce) on the \(NCCL\|MPI\) communicator" \
  1 0 0 1 || exit 1
# shellcheck disable=SC2086
assert_nothing_left "$job" $rank_pids
assert_gpu_memory_released "$before"

echo "== 2: kill -9 of rank 1"
job="gpukill-$$-$RANDOM"
log="$out/gpu_kill.log"
before=$(gpu_memory_used)
timeout --signal=KILL 240 "$root/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=65536 --synthetic_classes=10 --data_threads=4 -- \
  "${trainer_flags[@]}" --log_every=1 --loss_log="$log.loss" > "$log" 2>&1 &
launcher_pid=$!
await_training "$log" "$launcher_pid" 1200
rank_pids=$(pid_records "$log" role=rank world_size=2 split=training | sort -u | tr '\n' ' ')
killed=$(pid_records "$log" role=rank rank=1 world_size=2 split=training | head -n 1)
[[ -n "$killed" ]] || { kill -TERM "$launcher_pid"; cat "$log"; echo "FAIL: no pid for rank 1"; exit 1; }
kill -KILL "$killed"
start=$SECONDS
code=0
wait "$launcher_pid" || code=$?
echo "the job exited with code $code $((SECONDS - start)) s after the kill"
[[ "$code" -eq 69 ]] || { cat "$log"; echo "FAIL: exit code $code, expected 69"; exit 1; }
[[ $((SECONDS - start)) -le 10 ]] || { cat "$log"; echo "FAIL: the job took more than 10 s to end"; exit 1; }
# shellcheck disable=SC2086
assert_nothing_left "$job" $rank_pids
assert_gpu_memory_released "$before"
echo "PASS"
