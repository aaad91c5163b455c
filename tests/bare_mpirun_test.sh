#!/usr/bin/env bash
# A bare `mpirun -np 2 trainer ...`, no launcher: the node's local rank 0 starts the data
# service itself (Note [Data service per node] in launcher/rank/node_data_service.h), under a job
# id that rank 0 makes. The job must train (the loss falls, the ranks end bit-identical),
# exit 0, and leave no process, /dev/shm segment or /tmp/stoker.* file behind (its socket is
# /tmp/stoker.<job>/node0.sock, in the job's directory).
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# The data service is found next to the trainer (bazel-bin/data_service/data_service).
timeout --signal=KILL 240 mpirun -np 2 "$root/trainer/trainer" \
  --data_service_args="--dataset=synthetic --synthetic_samples=1024 --synthetic_classes=4 --threads=1" \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --epochs=2 --lr=0.05 \
  --log_every=8 --loss_log="$out/loss.txt" --final_params_out="$out/params" 2>&1 | tee "$out/log"

ready=$(grep -o 'node 0: data service (pid [0-9]*) ready on [^ ]*' "$out/log") ||
  { echo "FAIL: local rank 0 did not report its data service ready"; exit 1; }
pid=$(pid_records "$out/log" role=data_service node=0 | head -n 1)
socket="${ready##* }"
job=$(basename "$(dirname "$socket")"); job="${job#stoker.}"
echo "local rank 0 started the data service: pid $pid, socket $socket, job $job"
[[ "$socket" == "/tmp/stoker.$job/node0.sock" ]] || { echo "FAIL: unexpected socket $socket"; exit 1; }
grep -q "\[data_service node 0 .*rank 0 of 2" "$out/log" || { echo "FAIL: rank 0 never registered"; exit 1; }
grep -q "\[data_service node 0 .*rank 1 of 2" "$out/log" || { echo "FAIL: rank 1 never registered"; exit 1; }

# 1024 samples / 2 ranks / 32 = 16 steps per epoch, 2 epochs.
expect_loss_falls "$out/loss.txt" 32 0.8
cmp "$out/params.rank0" "$out/params.rank1" || { echo "FAIL: parameters differ across ranks"; exit 1; }

assert_nothing_left "$job" "$pid"
echo "PASS"
