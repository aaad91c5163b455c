#!/usr/bin/env bash
# Epoch seeding: rank 0 owns the seed. The two ranks are started with different --seed
# values (mpirun's MPMD form); both must train on rank 0's schedule, which is
# DistributedSampler's: epoch e's global order is torch.randperm(n) seeded with seed + e,
# shared by the ranks (rank r takes positions r, r + W, ...), different in every epoch.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
job="seeds-$$-$RANDOM"
samples=256  # 2 ranks x 8 batches of 16

common=(--job_id="$job" --data_service="$root/data_service/data_service"
  --data_service_args="--dataset=synthetic --synthetic_samples=$samples --synthetic_classes=4 --threads=1"
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=3 --lr=0.05
  --log_every=8 --sample_log="$out/samples")
timeout --signal=KILL 240 mpirun -np 1 "$root/trainer/trainer" --seed=5 "${common[@]}" \
  : -np 1 "$root/trainer/trainer" --seed=999 "${common[@]}" 2>&1 | tee "$out/log"

"$(stoker_python)" "$root/tests/check_sample_log.py" "$out/samples" --world=2 --epochs=3 \
  --samples="$samples" --seed=5
assert_nothing_left "$job"
echo "PASS"
