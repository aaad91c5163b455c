#!/usr/bin/env bash
# A run stopped and resumed from its checkpoint trains exactly as the uninterrupted run:
# the same batches and, on the CPU, bit-identical losses (rank 0's --loss_log). Stops at
# an optimizer step in the middle of an epoch (with gradient accumulation, a cosine
# schedule with warm-up and a dropped short batch in play), at the end of an epoch's
# trained batches, and with the newest checkpoint truncated (resume falls back to the one
# before it). Every job leaves nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# 1500 samples / 2 ranks = 750 per rank: 23 batches of 32 and a short one (dropped), so
# 12 optimizer steps of 2 micro-batches per epoch (the last one of 1).
run() {  # run NAME [trainer flags...]; sets $rc
  local name="$1"; shift
  run_launcher_job 0 resume "$name" \
    --dataset=synthetic --synthetic_samples="${SAMPLES:-1500}" --synthetic_classes=4 --data_threads=1 -- \
    --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --accumulate=2 \
    --epochs=3 --lr=0.1 --lr_schedule=cosine --warmup_epochs=0.5 --weight_decay=1e-4 \
    --no_decay_bn_bias --nesterov --label_smoothing=0.1 --clip_grad_norm=5 --log_every=5 \
    --val_every=1 "$@"
}

same_losses() {  # same_losses REFERENCE PARTS...: every line of the parts is the reference's
  local reference="$1"; shift
  cat "$@" | cmp - "$reference" || { echo "FAIL: $* differ from $reference"; diff <(cat "$@") "$reference" | head; exit 1; }
  echo "losses of $(basename -a "$@" | tr "\n" " ")are bit-identical to $(basename "$reference") ($(wc -l < "$reference") batches)"
}

run full --loss_log="$out/full.txt"
[[ $rc -eq 0 ]] || { cat "$out/full.log"; echo "FAIL: the uninterrupted run exited $rc"; exit 1; }
[[ $(wc -l < "$out/full.txt") -eq 69 ]] || { echo "FAIL: expected 3 x 23 trained batches"; exit 1; }

# Mid-epoch: 17 optimizer steps = epoch 2, after 10 of its batches.
run mid1 --loss_log="$out/mid1.txt" --checkpoint_dir="$out/ckpt_mid" --stop_after_steps=17
[[ $rc -eq 75 ]] || { cat "$out/mid1.log"; echo "FAIL: --stop_after_steps should exit 75, got $rc"; exit 1; }
grep -q "epoch 2, batch 10, step 17" "$out/mid1.log" || { echo "FAIL: no checkpoint at epoch 2 batch 10"; exit 1; }
run mid2 --loss_log="$out/mid2.txt" --checkpoint_dir="$out/ckpt_mid"
[[ $rc -eq 0 ]] || { cat "$out/mid2.log"; echo "FAIL: the resumed run exited $rc"; exit 1; }
grep -q "resuming from .*ckpt-000000000017.stoker: epoch 2, batch 10, step 17" "$out/mid2.log" ||
  { grep -i resum "$out/mid2.log"; echo "FAIL: did not resume from step 17"; exit 1; }
same_losses "$out/full.txt" "$out/mid1.txt" "$out/mid2.txt"

# An epoch's trained batches done (its short batch not yet consumed): 12 steps.
run end1 --loss_log="$out/end1.txt" --checkpoint_dir="$out/ckpt_end" --stop_after_steps=12
[[ $rc -eq 75 ]] || { cat "$out/end1.log"; echo "FAIL: exit $rc"; exit 1; }
run end2 --loss_log="$out/end2.txt" --checkpoint_dir="$out/ckpt_end"
[[ $rc -eq 0 ]] || { cat "$out/end2.log"; echo "FAIL: exit $rc"; exit 1; }
grep -q "epoch 1, batch 23, step 12" "$out/end2.log" || { echo "FAIL: did not resume at epoch 1 batch 23"; exit 1; }
same_losses "$out/full.txt" "$out/end1.txt" "$out/end2.txt"

# An epoch that ends exactly (1536 samples: 24 full batches a rank, no short one, 12 steps):
# stopped after its last step, the resumed run continues with the next epoch.
SAMPLES=1536 run exact_full --loss_log="$out/exact_full.txt" --epochs=2
[[ $rc -eq 0 ]] || { cat "$out/exact_full.log"; echo "FAIL: exit $rc"; exit 1; }
SAMPLES=1536 run exact1 --loss_log="$out/exact1.txt" --epochs=2 --checkpoint_dir="$out/ckpt_exact" --stop_after_steps=12
[[ $rc -eq 75 ]] || { cat "$out/exact1.log"; echo "FAIL: exit $rc"; exit 1; }
SAMPLES=1536 run exact2 --loss_log="$out/exact2.txt" --epochs=2 --checkpoint_dir="$out/ckpt_exact"
[[ $rc -eq 0 ]] || { cat "$out/exact2.log"; echo "FAIL: the run resumed at an epoch's end exited $rc"; exit 1; }
same_losses "$out/exact_full.txt" "$out/exact1.txt" "$out/exact2.txt"

# Checkpoints every 4 steps; stop at 22; truncate the newest (22): resume falls back to 20.
run trunc1 --loss_log="$out/trunc1.txt" --checkpoint_dir="$out/ckpt_trunc" --checkpoint_every_steps=4 \
  --stop_after_steps=22 --keep_checkpoints=2
[[ $rc -eq 75 ]] || { cat "$out/trunc1.log"; echo "FAIL: exit $rc"; exit 1; }
ls "$out/ckpt_trunc"
# Beside the checkpoints: the directory's LOCK and RUN (Note [One run per checkpoint directory]).
[[ $(ls "$out/ckpt_trunc" | grep -c '^ckpt-.*\.stoker$') -eq 2 ]] || { echo "FAIL: --keep_checkpoints=2 kept $(ls "$out/ckpt_trunc")"; exit 1; }
newest="$out/ckpt_trunc/ckpt-000000000022.stoker"
truncate -s $(( $(stat -c %s "$newest") / 2 )) "$newest"
run trunc2 --loss_log="$out/trunc2.txt" --checkpoint_dir="$out/ckpt_trunc"
[[ $rc -eq 0 ]] || { cat "$out/trunc2.log"; echo "FAIL: exit $rc"; exit 1; }
grep "skipping an invalid checkpoint" "$out/trunc2.log" | grep -q "truncated" ||
  { echo "FAIL: the truncated checkpoint was not reported"; exit 1; }
grep -q "resuming from .*ckpt-000000000020.stoker" "$out/trunc2.log" || { echo "FAIL: no fall-back to step 20"; exit 1; }
# Steps 21 and 22 were trained twice; each time with the same losses.
head -n "$(grep -c . "$out/trunc2.txt" | awk '{print 69 - $1}')" "$out/trunc1.txt" > "$out/trunc1_until20.txt"
same_losses "$out/full.txt" "$out/trunc1_until20.txt" "$out/trunc2.txt"
awk 'NR==FNR {ref[$1" "$2]=$3; next} ref[$1" "$2] != $3 {bad=1} END {exit bad}' "$out/full.txt" "$out/trunc1.txt" ||
  { echo "FAIL: the steps trained before the truncated checkpoint differ"; exit 1; }

# A finished run's final checkpoint: resuming it trains nothing and exits 0.
run again --checkpoint_dir="$out/ckpt_mid"
[[ $rc -eq 0 ]] || { cat "$out/again.log"; echo "FAIL: exit $rc"; exit 1; }
grep -q "nothing to train" "$out/again.log" || { echo "FAIL: a finished run trained again"; exit 1; }
echo "PASS"
