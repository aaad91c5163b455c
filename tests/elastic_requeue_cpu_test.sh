#!/usr/bin/env bash
# A requeue that loses nothing: a 3-rank job checkpointing every 4 steps has a rank killed
# (kill -9) in the middle of an epoch and exits with its requeue code (69, a lost rank);
# relaunched on 2 ranks with another per-rank batch, --resume=auto picks the newest complete
# checkpoint, and the samples the two runs trained in the epoch, counting the first run's up
# to that checkpoint (what it trained after it is lost with the killed job), are the
# epoch's global order, each position once (tests/check_epoch_order.py). Nothing of either
# run is left behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
seed=5
samples=960  # 320 per rank on 3 ranks: 40 steps of 8; 480 per rank on 2: 40 steps of 12

# start NP NAME [TRAINER FLAGS...]: a launcher job of NP ranks in the background; its
# output in $out/NAME.log, its sample logs $out/NAME.rank<r>, rank 0's losses $out/NAME.loss;
# sets job and pid.
start() {
  local np="$1" name="$2"; shift 2
  job="requeue-$name-$$-$RANDOM"
  timeout --signal=KILL 600 "$root/launcher/launcher" --np="$np" --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --seed=$seed --dataset=synthetic --synthetic_samples=$samples --synthetic_classes=4 \
    --data_threads=1 -- --model=small_cnn --num_classes=4 --image_size=32 --lr=0.05 --epochs=1 \
    --log_every=1 --checkpoint_dir="$out/ckpt" --checkpoint_every_steps=4 \
    --sample_log="$out/$name" --loss_log="$out/$name.loss" "$@" > "$out/$name.log" 2>&1 &
  pid=$!
}

echo "== the first run: 3 ranks, batch 8; rank 1 killed after step 14"
start 3 first --batch_size=8
for _ in $(seq 1800); do
  [[ $(cat "$out/first.loss" 2>/dev/null | wc -l) -ge 14 ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$out/first.log"; echo "FAIL: the first run ended early"; exit 1; }
  sleep 0.1
done
rank1=$(pid_records "$out/first.log" role=rank rank=1 world_size=3 split=training | head -n 1)
[[ -n "$rank1" ]] || { cat "$out/first.log"; echo "FAIL: no pid record of rank 1"; exit 1; }
kill -KILL "$rank1"
set +e; wait "$pid"; rc=$?; set -e
first_job=$job
[[ $rc -eq 69 ]] || { cat "$out/first.log"; echo "FAIL: the killed job exited $rc, not 69 (a lost rank: requeue)"; exit 1; }
assert_nothing_left "$first_job" "$rank1"
trained_first=$(wc -l < "$out/first.loss")
echo "the first run trained $trained_first batches and exited 69; checkpoints: $(ls "$out/ckpt" | tr '\n' ' ')"

echo "== the requeued run: 2 ranks, batch 12, --resume=auto"
start 2 second --batch_size=12 --resume=auto
set +e; wait "$pid"; rc=$?; set -e
[[ $rc -eq 0 ]] || { cat "$out/second.log"; echo "FAIL: the requeued run exited $rc"; exit 1; }
assert_nothing_left "$job"
line=$(grep -o "resuming from .*ckpt-[0-9]*\.stoker: epoch 1, batch [0-9]*, step [0-9]* (sample [0-9]* of the epoch's order" "$out/second.log") ||
  { cat "$out/second.log"; echo "FAIL: the requeued run did not resume mid-epoch"; exit 1; }
echo "$line"
step=$(sed -E 's/.*, step ([0-9]+) .*/\1/' <<< "$line")
position=$(sed -E 's/.*\(sample ([0-9]+) .*/\1/' <<< "$line")
newest=$(ls "$out/ckpt" | grep -E '^ckpt-[0-9]+\.stoker$' | sort | tail -n 1)
# The newest complete checkpoint of the first run (the requeued run wrote later ones).
first_newest=$(( (trained_first / 4) * 4 ))
[[ $step -ge 4 && $step -le $first_newest && $((step % 4)) -eq 0 ]] ||
  { echo "FAIL: resumed at step $step; the first run trained $trained_first steps"; exit 1; }
[[ $position -eq $((step * 24)) ]] || { echo "FAIL: step $step is not sample $position"; exit 1; }
"$python" "$root/tests/check_epoch_order.py" --samples=$samples --seed=$seed --epoch=0 \
  --drop_last_batch "$out/first:3:8:0:$position" "$out/second:2:12:$position"
echo "PASS"
