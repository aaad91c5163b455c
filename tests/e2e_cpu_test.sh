#!/usr/bin/env bash
# End to end on the CPU: the launcher starts a data service and 2 trainer ranks under
# mpirun. The loss must fall, the ranks must end with bit-identical parameters, and no
# process, /dev/shm segment or socket of the job may be left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test e2e

run_synthetic_job 2 "$job" 1536 4 --model=small_cnn --image_size=32 --batch_size=32 --epochs=2 \
  --lr=0.05 --log_every=6 --loss_log="$out/loss.txt" --final_params_out="$out/params" 2>&1 | tee "$out/log"

# 1536 samples / 2 ranks / 32 = 24 steps per epoch, 2 epochs.
expect_loss_falls "$out/loss.txt" 48 0.7

cmp "$out/params.rank0" "$out/params.rank1" || { echo "FAIL: parameters differ across ranks"; exit 1; }
echo "parameters bit-identical across ranks ($(stat -c %s "$out/params.rank0") bytes)"

leftover_shm=$(ls /dev/shm | grep -F "stoker.$job." || true)
[[ -z "$leftover_shm" ]] || { echo "FAIL: segments left: $leftover_shm"; exit 1; }
[[ ! -e "/tmp/stoker.$job" ]] || { echo "FAIL: job directory /tmp/stoker.$job left"; exit 1; }
sleep 0.5
leftover_procs=$(pgrep -af -- "$job" | grep -v pgrep || true)
[[ -z "$leftover_procs" ]] || { echo "FAIL: processes left: $leftover_procs"; exit 1; }
echo "PASS: nothing of job $job left behind"
