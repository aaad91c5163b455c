#!/usr/bin/env bash
# A kill during an asynchronous checkpoint write (--checkpoint_async) never leaves a
# checkpoint that resumes wrongly. Rank 0 is SIGKILLed while the writer thread is in the
# middle of the step-12 checkpoint (held there by the test-only pause after its first part,
# STOKER_TEST_CHECKPOINT_WRITE_PAUSE_MS), after training went on to the end of the epoch
# meanwhile (the step waited only for the copy; the stall is in --metrics_jsonl). The torn
# file is the write's temporary: the next run removes it by its name and resumes from the
# previous complete checkpoint (step 8); the same torn bytes under a checkpoint's name, as a
# crash can leave a file whose length is there but not its data, are refused by their CRC
# and the run falls back to step 8 too. Either way training continues with the
# uninterrupted run's losses, bit for bit, and every job leaves nothing behind. Checkpoints
# due while the previous write is in flight wait for it, and say so.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# 1024 samples / 2 ranks / 32 = 16 steps per epoch.
run() { run_small_job asyncckpt "$@"; }  # run NAME [trainer flags...]; sets $rc

run full --loss_log="$out/full.txt"
[[ $rc -eq 0 ]] || { cat "$out/full.log"; echo "FAIL: the uninterrupted run exited $rc"; exit 1; }
[[ $(wc -l < "$out/full.txt") -eq 16 ]] || { echo "FAIL: expected 16 trained steps"; exit 1; }

# Checkpoints at steps 4 and 8, written completely; the run stops after step 8.
ckpt="$out/ckpt"
run first --loss_log="$out/first.txt" --checkpoint_dir="$ckpt" --checkpoint_every_steps=4 \
  --stop_after_steps=8 --checkpoint_async
[[ $rc -eq 75 ]] || { cat "$out/first.log"; echo "FAIL: --stop_after_steps should exit 75, got $rc"; exit 1; }
grep -q "ckpt-000000000008.stoker written in the background" "$out/first.log" ||
  { cat "$out/first.log"; echo "FAIL: the step-8 checkpoint was not written in the background"; exit 1; }

# Resumed at step 8 with every checkpoint write pausing for 120 s after its first part: the
# step-12 write stays in flight while training goes on to the end of the epoch (step 16),
# where the run waits for it. Rank 0 (the pid in the directory's LOCK) is killed there.
job="asyncckpt-killed-$$-$RANDOM"
STOKER_TEST_CHECKPOINT_WRITE_PAUSE_MS=120000 timeout --signal=KILL 240 "$root/launcher/launcher" \
  --np=2 --job_id="$job" --trainer="$root/trainer/trainer" \
  --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=1024 --synthetic_classes=4 --data_threads=1 -- \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --epochs=1 --lr=0.05 \
  --log_every=4 --loss_log="$out/killed.txt" --checkpoint_dir="$ckpt" --checkpoint_every_steps=4 \
  --checkpoint_async --metrics_jsonl="$out/killed.jsonl" > "$out/killed.log" 2>&1 &
launcher_pid=$!
torn=""
for _ in $(seq 1200); do
  torn=$(ls -A "$ckpt" | grep '^\.ckpt-000000000012\.stoker\.tmp-' || true)
  [[ -n "$torn" && -f "$out/killed.txt" && $(wc -l < "$out/killed.txt") -ge 8 ]] && break
  kill -0 "$launcher_pid" 2>/dev/null || { cat "$out/killed.log"; echo "FAIL: the job ended before the kill"; exit 1; }
  sleep 0.1
done
[[ -n "$torn" && $(wc -l < "$out/killed.txt") -ge 8 ]] ||
  { kill -KILL "$launcher_pid"; cat "$out/killed.log"; ls -la "$ckpt"; echo "FAIL: no write in flight while training went on to step 16"; exit 1; }
writer_pid=$(awk '{print $2}' "$ckpt/LOCK")
[[ -f "$ckpt/$torn" ]] || { echo "FAIL: the temporary file went away before the kill"; exit 1; }
echo "the step-12 write is in flight ($(stat -c %s "$ckpt/$torn") bytes written) while training reached step 16; SIGKILL to rank 0 (pid $writer_pid)"
kill -KILL "$writer_pid"
set +e
wait "$launcher_pid"
killed_rc=$?
set -e
[[ $killed_rc -ne 0 && $killed_rc -ne 75 ]] || { cat "$out/killed.log"; echo "FAIL: the killed job exited $killed_rc"; exit 1; }
assert_nothing_left "$job"
# The step waited for the copy, not the write: its stall is in the JSON lines.
grep '"type": "checkpoint"' "$out/killed.jsonl" | grep '"global_step": 12' | grep -q '"async": true' ||
  { cat "$out/killed.jsonl"; echo "FAIL: no JSON line of the step-12 checkpoint"; exit 1; }
stall=$(grep '"type": "checkpoint"' "$out/killed.jsonl" | grep '"global_step": 12' | sed 's/.*"stall_s": \([0-9.e-]*\).*/\1/')
awk -v s="$stall" 'BEGIN {exit !(s < 10)}' || { echo "FAIL: the step waited $stall s for a write that takes 120 s"; exit 1; }
echo "the step-12 checkpoint stalled training for $stall s"
size8=$(stat -c %s "$ckpt/ckpt-000000000008.stoker")
torn_size=$(stat -c %s "$ckpt/$torn")
[[ $torn_size -gt 0 && $torn_size -lt $size8 ]] || { echo "FAIL: the temporary has $torn_size bytes of $size8"; exit 1; }
[[ ! -e "$ckpt/ckpt-000000000012.stoker" ]] || { echo "FAIL: a step-12 checkpoint appeared"; exit 1; }
head -n 8 "$out/killed.txt" | cmp - <(sed -n 9,16p "$out/full.txt") ||
  { echo "FAIL: the losses of steps 9 to 16 differ from the uninterrupted run's"; exit 1; }

# The torn bytes under a checkpoint's name, their length made whole with zeros.
cp -a "$ckpt" "$out/ckpt_named"
cp "$ckpt/$torn" "$out/ckpt_named/ckpt-000000000012.stoker"
truncate -s "$size8" "$out/ckpt_named/ckpt-000000000012.stoker"
rm "$out/ckpt_named/$torn"

# As the kill left it: the temporary is removed by its name; step 8 is the newest.
run resumed --loss_log="$out/resumed.txt" --checkpoint_dir="$ckpt"
[[ $rc -eq 0 ]] || { cat "$out/resumed.log"; echo "FAIL: the resumed run exited $rc"; exit 1; }
grep -q "removed 1 partial checkpoint file(s) of an interrupted write" "$out/resumed.log" ||
  { cat "$out/resumed.log"; echo "FAIL: the torn temporary was not removed"; exit 1; }
[[ ! -e "$ckpt/$torn" ]] || { echo "FAIL: the torn temporary is still there"; exit 1; }
expect_resumed_at_step_8 resumed "the resumption"

# Under a checkpoint's name: refused by its CRC, and the run falls back to step 8.
run named --loss_log="$out/named.txt" --checkpoint_dir="$out/ckpt_named"
[[ $rc -eq 0 ]] || { cat "$out/named.log"; echo "FAIL: the run exited $rc"; exit 1; }
grep "skipping an invalid checkpoint" "$out/named.log" |
  grep -F "$out/ckpt_named/ckpt-000000000012.stoker: checksum mismatch" ||
  { cat "$out/named.log"; echo "FAIL: the torn checkpoint was not refused by its CRC"; exit 1; }
expect_resumed_at_step_8 named "the fall-back"
echo "the torn write was refused by name and by CRC; both runs resumed at step 8 with the uninterrupted run's losses"

# Checkpoints due faster than they are written (each write held 2 s): each waits for the
# write before it and says so; the run ends once the last is written, with the same losses.
STOKER_TEST_CHECKPOINT_WRITE_PAUSE_MS=2000 run waits --loss_log="$out/waits.txt" \
  --checkpoint_dir="$out/ckpt_waits" --checkpoint_every_steps=4 --checkpoint_async \
  --metrics_jsonl="$out/waits.jsonl"
[[ $rc -eq 0 ]] || { cat "$out/waits.log"; echo "FAIL: exit $rc"; exit 1; }
grep -q "first waited .* s for the previous checkpoint's write to end" "$out/waits.log" ||
  { cat "$out/waits.log"; echo "FAIL: a checkpoint that waited for the previous write did not say so"; exit 1; }
grep '"type": "checkpoint"' "$out/waits.jsonl" | sed 's/.*"waited_s": \([0-9.e-]*\).*/\1/' |
  awk '$1 > 0.1 {found = 1} END {exit !found}' ||
  { cat "$out/waits.jsonl"; echo "FAIL: no JSON line shows the wait for the previous write"; exit 1; }
ls "$out/ckpt_waits"
[[ "$(ls "$out/ckpt_waits" | grep -c '^ckpt-.*\.stoker$')" -eq 3 ]] || { echo "FAIL: expected the newest 3 checkpoints"; exit 1; }
cmp "$out/waits.txt" "$out/full.txt" || { echo "FAIL: the losses differ from the uninterrupted run's"; exit 1; }
grep "first waited" "$out/waits.log" | head -n 1
echo "PASS"
