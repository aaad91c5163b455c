#!/usr/bin/env bash
# A run stopped in the middle of an epoch on 3 ranks resumes on 2 and on 4, with the per-rank
# batch changed: between them the runs train every position of the epoch's global order
# once, in order (tests/check_epoch_order.py reads their --sample_log), and the next epoch
# is a whole one on the new ranks. Where the global batch is unchanged the resumed run
# continues at the same optimizer step and its step losses are the uninterrupted run's, by
# value (--sync_batchnorm: a step's result depends only on the global batch, up to the
# order of float sums); where it changed, the schedule continues by samples seen and the
# loss continues where it was. The same with an odd dataset size, with and without
# --drop_last_batch. A mid-epoch resume on another dataset or seed is refused by name.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
check="$python $root/tests/check_epoch_order.py"  # the trainer's --drop_last_batch is the default
seed=11

# run NP NAME SAMPLES [TRAINER FLAGS...]: a launcher job of NP ranks on SAMPLES synthetic
# samples, with --seed=$run_seed (default $seed); its output in $out/NAME.log, its sample logs $out/NAME.rank<r>, rank 0's losses
# $out/NAME.loss, its progress records $out/NAME.jsonl; sets rc.
run() {
  local np="$1" name="$2" samples="$3" job="elastic-$2-$$-$RANDOM"; shift 3
  set +e
  timeout 600 "$root/launcher/launcher" --np="$np" --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --seed="${run_seed:-$seed}" --dataset=synthetic --synthetic_samples="$samples" \
    --synthetic_classes=4 --data_threads=1 -- --model=small_cnn --num_classes=4 --image_size=32 --lr=0.05 \
    --lr_schedule=cosine --warmup_epochs=0.5 --sync_batchnorm --log_every=1 --val_every=1 \
    --sample_log="$out/$name" --loss_log="$out/$name.loss" --metrics_jsonl="$out/$name.jsonl" \
    "$@" > "$out/$name.log" 2>&1
  rc=$?
  set -e
  assert_nothing_left "$job"
}

expect_rc() {  # expect_rc NAME CODE
  [[ $rc -eq $2 ]] || { cat "$out/$1.log"; echo "FAIL: $1 exited $rc, expected $2"; exit 1; }
}

# resume NP NAME SAMPLES STOPPED [TRAINER FLAGS...]: run NAME from a copy of run STOPPED's
# checkpoints; it must finish.
resume() {
  local np="$1" name="$2" samples="$3" stopped="$4"; shift 4
  cp -r "$out/ckpt-$stopped" "$out/ckpt-$name"
  run "$np" "$name" "$samples" --checkpoint_dir="$out/ckpt-$name" "$@"
  expect_rc "$name" 0
  grep -q "resuming from .*: epoch 1, batch 10, step 10 (sample 240 of the epoch's order, global batch 24)" \
    "$out/$name.log" || { grep -i resum "$out/$name.log"; echo "FAIL: $name did not resume at sample 240"; exit 1; }
}

# step_losses NAME: `global_step loss` of each progress record (one a step, --log_every=1).
step_losses() {
  "$python" -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "train":
        print(r["global_step"], r["loss"])' "$out/$1.jsonl"
}

# same_step_losses REFERENCE NAME: every step NAME logged has REFERENCE's loss at that step,
# to a relative 1e-4.
same_step_losses() {
  local n
  n=$(awk 'NR == FNR {ref[$1] = $2; next}
           !($1 in ref) {print "FAIL: step " $1 " is not in the reference"; exit 1}
           {d = $2 - ref[$1]; if (d < 0) d = -d; if (d > 1e-4 * ref[$1]) {
              print "FAIL: step " $1 ": loss " $2 ", the uninterrupted run had " ref[$1]; exit 1}
            n++}
           END {print n + 0}' <(step_losses "$1") <(step_losses "$2"))
  [[ "$n" =~ ^[0-9]+$ && "$n" -gt 0 ]] || { echo "$n"; echo "FAIL: $2's losses differ from $1's"; exit 1; }
  echo "$2: the losses of its $n steps are the uninterrupted run's"
}

# validated NAME SAMPLES: NAME validated, each time on the SAMPLES / 10 samples of the split.
validated() {
  "$python" - "$out/$1.jsonl" "$(( $2 / 10 ))" <<'PY'
import json, sys
counts = [r["samples"] for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "val"]
if not counts or set(counts) != {int(sys.argv[2])}:
    sys.exit(f"FAIL: {sys.argv[1]}: validations counted {counts}, expected {sys.argv[2]} each")
print(f"validation counted the split's {sys.argv[2]} samples each time")
PY
}

echo "== 600 samples: 200 per rank on 3 ranks, 25 batches of 8; stopped after 10 steps"
run 3 full 600 --batch_size=8 --epochs=2
expect_rc full 0
run 3 stop 600 --batch_size=8 --epochs=2 --checkpoint_dir="$out/ckpt-stop" --stop_after_steps=10
expect_rc stop 75
$check --samples=600 --seed=$seed --epoch=0 "$out/full:3:8:0" "$out/full:3:8:0" 2>/dev/null &&
  { echo "FAIL: the checker accepts an epoch trained twice"; exit 1; }

# The global batch unchanged (24): the same optimizer steps, the same losses.
resume 2 w2 600 stop --batch_size=12 --epochs=2
grep -q "global batch of 24 did not: the schedule continues at step 10" "$out/w2.log" ||
  { cat "$out/w2.log"; echo "FAIL: no schedule note"; exit 1; }
$check --samples=600 --seed=$seed --epoch=0 --drop_last_batch "$out/stop:3:8:0" "$out/w2:2:12:240"
$check --samples=600 --seed=$seed --epoch=1 --drop_last_batch "$out/w2:2:12:0"
same_step_losses full w2
validated w2 600
resume 4 w4 600 stop --batch_size=6 --epochs=2
$check --samples=600 --seed=$seed --epoch=0 --drop_last_batch "$out/stop:3:8:0" "$out/w4:4:6:240"
$check --samples=600 --seed=$seed --epoch=1 --drop_last_batch "$out/w4:4:6:0"
same_step_losses full w4
validated w4 600

# The global batch changed (32): the schedule continues by samples seen (240 / 32 = step 7),
# and the loss where it was.
resume 4 w4b8 600 stop --batch_size=8 --epochs=2
grep -q "the global batch changed from 24 to 32: the schedule continues by samples seen, at step 7" \
  "$out/w4b8.log" || { cat "$out/w4b8.log"; echo "FAIL: no schedule note"; exit 1; }
$check --samples=600 --seed=$seed --epoch=0 --drop_last_batch "$out/stop:3:8:0" "$out/w4b8:4:8:240"
$check --samples=600 --seed=$seed --epoch=1 --drop_last_batch "$out/w4b8:4:8:0"
"$python" - "$out/full.jsonl" "$out/w4b8.jsonl" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "train"]
full, resumed = losses(sys.argv[1]), losses(sys.argv[2])
start, stopped, first = sum(full[:3]) / 3, sum(full[7:10]) / 3, sum(resumed[:3]) / 3
print(f"mean loss: first 3 steps {start:.4f}, steps 8-10 {stopped:.4f}, first 3 resumed {first:.4f}")
if not abs(first - stopped) < 0.5 * abs(start - stopped):
    sys.exit("FAIL: the resumed run's loss does not continue from where it stopped")
PY
validated w4b8 600

echo "== refusals: another dataset size, another seed"
cp -r "$out/ckpt-stop" "$out/ckpt-refused"
run 2 other_data 700 --batch_size=12 --epochs=2 --checkpoint_dir="$out/ckpt-refused"
[[ $rc -ne 0 ]] && grep -q "stopped in the middle of epoch 1 of a training set of 600 samples; the data service serves 700 (launcher --train_dir, --dataset, --synthetic_samples)" "$out/other_data.log" ||
  { cat "$out/other_data.log"; echo "FAIL: another dataset was not refused by name"; exit 1; }
run_seed=12 run 2 other_seed 600 --batch_size=12 --epochs=2 --checkpoint_dir="$out/ckpt-seed" \
  --resume="$out/ckpt-refused/ckpt-000000000010.stoker"
[[ $rc -ne 0 ]] && grep -q -- "--seed=12" "$out/other_seed.log" ||
  { cat "$out/other_seed.log"; echo "FAIL: another seed was not refused by name"; exit 1; }

echo "== 601 samples (odd): 201 per rank on 3 ranks, padded by 2; the short batch trained or dropped"
for drop in nodrop drop; do
  run 3 "stop_$drop" 601 --batch_size=8 --epochs=1 --checkpoint_dir="$out/ckpt-stop_$drop" \
    --stop_after_steps=10 --${drop}_last_batch
  expect_rc "stop_$drop" 75
  flag=$([[ $drop == drop ]] && echo --drop_last_batch || true)
  resume 2 "w2_$drop" 601 "stop_$drop" --batch_size=12 --epochs=1 --${drop}_last_batch
  $check --samples=601 --seed=$seed --epoch=0 $flag "$out/stop_$drop:3:8:0" "$out/w2_$drop:2:12:240"
  resume 4 "w4_$drop" 601 "stop_$drop" --batch_size=5 --epochs=1 --${drop}_last_batch
  $check --samples=601 --seed=$seed --epoch=0 $flag "$out/stop_$drop:3:8:0" "$out/w4_$drop:4:5:240"
  validated "w4_$drop" 601
done
echo "PASS"
