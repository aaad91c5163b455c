#!/usr/bin/env bash
# The disk fills while rank 0 writes a checkpoint. The checkpoint folder is a tmpfs with
# room for one checkpoint but not two (mounted in a private mount namespace: a real ENOSPC
# from the kernel, nothing injected). Stoker's choice: the run fails at once with a message
# naming the checkpoint file and ENOSPC; the partial temporary file is removed; the
# previous checkpoint stays intact, and a rerun resumes from it with the uninterrupted
# run's losses, bit for bit. The job leaves nothing behind. With the write on the writer
# thread (--checkpoint_async) the same, the failure ending the run at a step boundary after
# the write failed, with the same exit code and message.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
in_private_mount_namespace "$0" "$@"
begin_job_test

# 1024 samples / 2 ranks / 32 = 16 steps per epoch.
run() { run_small_job diskfull "$@"; }  # run NAME [trainer flags...]; sets $rc

run full --loss_log="$out/full.txt"
[[ $rc -eq 0 ]] || { cat "$out/full.log"; echo "FAIL: the uninterrupted run exited $rc"; exit 1; }

# The size of one checkpoint, from a run on the real disk.
run sizing --checkpoint_dir="$out/ckpt_sizing" --stop_after_steps=4
[[ $rc -eq 75 ]] || { cat "$out/sizing.log"; echo "FAIL: exit $rc"; exit 1; }
size=$(stat -c %s "$out/ckpt_sizing/ckpt-000000000004.stoker")
tmpfs_bytes=$(( (size * 3 / 2 + 4095) / 4096 * 4096 ))
echo "a checkpoint is $size bytes; the checkpoint tmpfs holds $tmpfs_bytes"

mkdir -p "$out/ckpt_full"
mount -t tmpfs -o size="$tmpfs_bytes" stoker-test-full "$out/ckpt_full"
# Checkpoints at steps 4 (fits) and 8 (does not fit beside it).
start=$SECONDS
run nospace --loss_log="$out/nospace.txt" --checkpoint_dir="$out/ckpt_full" --checkpoint_every_steps=4 \
  --nocheckpoint_async
echo "the run ended after $(( SECONDS - start )) s with exit code $rc"
[[ $rc -ne 0 && $rc -ne 75 ]] || { cat "$out/nospace.log"; echo "FAIL: a full disk must fail the run, got exit $rc"; exit 1; }
# Checkpoint I/O is exit code 74 (common/exit_codes.h).
[[ $rc -eq 74 ]] || { cat "$out/nospace.log"; echo "FAIL: a full disk must exit 74, got $rc"; exit 1; }
newer="$out/ckpt_full/ckpt-000000000008.stoker"
grep -F "cannot write $newer" "$out/nospace.log" | grep -F "No space left on device" | grep -q "ENOSPC" ||
  { cat "$out/nospace.log"; echo "FAIL: the error does not name $newer and ENOSPC"; exit 1; }
grep -F "cannot write $newer" "$out/nospace.log" | head -n 1
ls -A "$out/ckpt_full"
# Beside the directory's LOCK and RUN (Note [One run per checkpoint directory]): no
# temporary, no partial step-8 file.
[[ "$(ls -A "$out/ckpt_full" | grep -v -x -e LOCK -e RUN)" == "ckpt-000000000004.stoker" ]] ||
  { echo "FAIL: the checkpoint folder should hold only the step-4 checkpoint"; exit 1; }
[[ $(wc -l < "$out/nospace.txt") -eq 8 ]] || { echo "FAIL: expected 8 trained steps before the failure"; exit 1; }

# The step-4 checkpoint is intact: resume from it (on the real disk) and finish.
cp -a "$out/ckpt_full" "$out/ckpt_copy"
umount "$out/ckpt_full"
run resumed --loss_log="$out/resumed.txt" --checkpoint_dir="$out/ckpt_copy"
[[ $rc -eq 0 ]] || { cat "$out/resumed.log"; echo "FAIL: the resumed run exited $rc"; exit 1; }
grep -q "resuming from .*ckpt-000000000004.stoker" "$out/resumed.log" ||
  { grep -i resum "$out/resumed.log"; echo "FAIL: did not resume from step 4"; exit 1; }
head -n 4 "$out/full.txt" | cat - "$out/resumed.txt" | cmp - "$out/full.txt" ||
  { echo "FAIL: the resumed losses differ from the uninterrupted run's"; exit 1; }
head -n 8 "$out/full.txt" | cmp - "$out/nospace.txt" ||
  { echo "FAIL: the losses before the full disk differ"; exit 1; }
echo "resumed from step 4 with the uninterrupted run's losses ($(wc -l < "$out/full.txt") steps)"

# The same on the writer thread: the step-8 write fails while step 9 trains.
mkdir -p "$out/ckpt_full_async"
mount -t tmpfs -o size="$tmpfs_bytes" stoker-test-full-async "$out/ckpt_full_async"
run nospace_async --loss_log="$out/nospace_async.txt" --checkpoint_dir="$out/ckpt_full_async" \
  --checkpoint_every_steps=4 --checkpoint_async
[[ $rc -eq 74 ]] || { cat "$out/nospace_async.log"; echo "FAIL: a full disk must exit 74 with --checkpoint_async, got $rc"; exit 1; }
newer="$out/ckpt_full_async/ckpt-000000000008.stoker"
grep -F "cannot write $newer" "$out/nospace_async.log" | grep -F "No space left on device" | grep -q "ENOSPC" ||
  { cat "$out/nospace_async.log"; echo "FAIL: the error does not name $newer and ENOSPC"; exit 1; }
[[ "$(ls -A "$out/ckpt_full_async" | grep -v -x -e LOCK -e RUN)" == "ckpt-000000000004.stoker" ]] ||
  { ls -A "$out/ckpt_full_async"; echo "FAIL: the checkpoint folder should hold only the step-4 checkpoint"; exit 1; }
trained=$(wc -l < "$out/nospace_async.txt")
[[ $trained -ge 8 ]] || { echo "FAIL: expected at least 8 trained steps before the failure, got $trained"; exit 1; }
head -n "$trained" "$out/full.txt" | cmp - "$out/nospace_async.txt" ||
  { echo "FAIL: the losses before the full disk differ"; exit 1; }
cmp "$out/ckpt_full_async/ckpt-000000000004.stoker" "$out/ckpt_copy/ckpt-000000000004.stoker" ||
  { echo "FAIL: the step-4 checkpoints of the synchronous and asynchronous writes differ"; exit 1; }
umount "$out/ckpt_full_async"
echo "with --checkpoint_async: exit 74 after $trained trained steps, the step-4 checkpoint intact"
echo "PASS"
