#!/usr/bin/env bash
# The launcher's hosts mode for real, with this machine as the only host:
# `launcher --hosts=localhost:2` runs `mpirun -np 2 -H localhost:2 trainer --job_id=...
# --data_service_args=...`; the launcher starts no data service itself, the node's local
# rank 0 does. The job must train, exit 0, and leave nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
job="hosts-$$-$RANDOM"

timeout --signal=KILL 240 "$root/launcher/launcher" --hosts=localhost:2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=512 --synthetic_classes=4 --data_threads=1 -- \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --epochs=1 \
  --log_every=4 --loss_log="$out/loss.txt" 2>&1 | tee "$out/log"

grep -q "job $job (hosts mode): running: NCCL_NVLS_ENABLE=0 mpirun -np 2 -H localhost:2 " "$out/log" ||
  { echo "FAIL: the launcher did not print the mpirun command of the hosts mode"; exit 1; }
grep -q "node 0: data service (pid [0-9]*) ready on /tmp/stoker.$job/node0.sock" "$out/log" ||
  { echo "FAIL: local rank 0 did not start the node's data service"; exit 1; }
grep -q "job $job finished" "$out/log" || { echo "FAIL: the job did not finish"; exit 1; }
steps=$(wc -l < "$out/loss.txt")
[[ "$steps" -eq 8 ]] || { echo "FAIL: expected 8 logged steps, got $steps"; exit 1; }
assert_nothing_left "$job"
echo "PASS"
