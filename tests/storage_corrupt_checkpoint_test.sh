#!/usr/bin/env bash
# A damaged checkpoint (one flipped byte in the middle, as bit rot or a bad copy makes)
# is refused with an error naming the file; --resume=auto falls back to the checkpoint
# before it and trains on with the uninterrupted run's losses, bit for bit. Asked for by
# path (--resume=FILE), the damaged file fails the run naming it; with every checkpoint
# damaged, --resume=auto fails naming the folder instead of silently starting afresh.
# Every job leaves nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# 1024 samples / 2 ranks / 32 = 16 steps per epoch.
run() { run_small_job corrupt "$@"; }  # run NAME [trainer flags...]; sets $rc

flip_byte() {  # flip_byte FILE DIVISOR: xor the byte at 1/DIVISOR of the file with 0x20
  "${STOKER_PYTHON:-python3}" - "$1" "$2" <<'PY'
import sys
path, divisor = sys.argv[1], int(sys.argv[2])
data = bytearray(open(path, "rb").read())
data[len(data) // divisor] ^= 0x20
open(path, "wb").write(bytes(data))
PY
}

run full --loss_log="$out/full.txt"
[[ $rc -eq 0 ]] || { cat "$out/full.log"; echo "FAIL: the uninterrupted run exited $rc"; exit 1; }

run first --loss_log="$out/first.txt" --checkpoint_dir="$out/ckpt" --checkpoint_every_steps=4 --stop_after_steps=12
[[ $rc -eq 75 ]] || { cat "$out/first.log"; echo "FAIL: exit $rc"; exit 1; }
ls "$out/ckpt"
damaged="$out/ckpt/ckpt-000000000012.stoker"
flip_byte "$damaged" 2

# By path: refused, naming the file; no fall-back when a file was asked for.
run by_path --resume="$damaged"
[[ $rc -ne 0 && $rc -ne 124 && $rc -ne 75 ]] || { cat "$out/by_path.log"; echo "FAIL: a damaged --resume file should fail the run, exit $rc"; exit 1; }
grep -F -- "--resume=$damaged: $damaged: checksum mismatch" "$out/by_path.log" ||
  { cat "$out/by_path.log"; echo "FAIL: the error does not name the damaged file"; exit 1; }

# Automatic: the damaged newest is skipped by name, step 8 is used, the losses are the same.
run fallback --loss_log="$out/fallback.txt" --checkpoint_dir="$out/ckpt"
[[ $rc -eq 0 ]] || { cat "$out/fallback.log"; echo "FAIL: the fall-back run exited $rc"; exit 1; }
grep "skipping an invalid checkpoint" "$out/fallback.log" | grep -F "$damaged: checksum mismatch" ||
  { cat "$out/fallback.log"; echo "FAIL: the damaged checkpoint was not reported by name"; exit 1; }
expect_resumed_at_step_8 fallback "the fall-back"
echo "fell back to step 8; steps 9 to 16 have the uninterrupted run's losses"

# Every checkpoint damaged: --resume=auto refuses to start afresh silently.
mkdir -p "$out/all_bad"
# (A byte other than the one flipped before: flipping that one again would repair it.)
for f in "$out"/ckpt/ckpt-*.stoker; do cp "$f" "$out/all_bad/"; flip_byte "$out/all_bad/$(basename "$f")" 3; done
run all_bad --checkpoint_dir="$out/all_bad"
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$out/all_bad.log"; echo "FAIL: expected a failure, exit $rc"; exit 1; }
grep -F -- "--resume=auto: no valid checkpoint in $out/all_bad" "$out/all_bad.log" | grep -q "Pass --resume=none" ||
  { cat "$out/all_bad.log"; echo "FAIL: no clear error for a folder of damaged checkpoints"; exit 1; }
echo "PASS"
