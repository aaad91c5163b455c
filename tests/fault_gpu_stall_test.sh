#!/usr/bin/env bash
# A stalled rank on GPUs (tag gpu: runs where 2 GPUs are visible; skips itself otherwise):
# SIGSTOP of rank 1 of a 2-GPU job under the launcher. Rank 0's collective watchdog
# (--collective_timeout_s=10) reports the stuck collective (an NCCL gradient allreduce, or
# the MPI stop vote), names rank 1 as stalled, aborts the NCCL communicator
# (ncclCommAbort) and ends; the job ends within 60 s with a non-zero code and nothing of
# it is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
if [[ "$gpus" -lt 2 ]]; then echo "SKIP: needs 2 GPUs (found ${gpus:-0})"; exit 0; fi
job="gpustall-$$-$RANDOM"
log="$out/gpu_stall.log"

stall_launcher_job "$log" "$out/loss" 5 2 1 240 \
  --dataset=synthetic --synthetic_samples=65536 --synthetic_classes=10 --data_threads=4 -- \
  --device=cuda --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 --epochs=100 ||
  exit 1
check_stall_report "$log" \
  "\[trainer rank 0 .*collective watchdog: collective #[0-9]* (allreduce) on the \(NCCL\|MPI\) communicator" \
  1 0 0 1 || exit 1
# shellcheck disable=SC2086
assert_nothing_left "$job" $rank_pids
echo "PASS"
