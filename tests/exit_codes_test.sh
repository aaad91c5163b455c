#!/usr/bin/env bash
# Exit codes a scheduler can act on (common/exit_codes.h), end to end through the launcher,
# mpirun, the trainers and the data service on the CPU: each cause reachable here ends the
# job with its code, and the job's first error line names the cause and the rank or file:
#  - a bad flag of the launcher, and one of the trainers: 2;
#  - a dataset with more classes than --num_classes: 65, refused before the first step,
#    naming both counts;
#  - more unusable files than --max_bad_fraction allows: 65, naming a file;
#  - a checkpoint that cannot be read (--resume=FILE of garbage): 74, naming the file.
# Bound: each job ends within 60 s and leaves nothing behind. The other codes are asserted
# where their faults are made: 2 for /dev/shm too small by storage_small_shm_test and for
# another user's segment under a ring's name by fault_shm_test; 69 (a peer lost) for a
# killed process by fault_kill_test, for a truncated ring and an overwritten slot by
# fault_shm_test, for a stopped data service by fault_service_stall_test; 124 (a
# collective timeout) by fault_stall_test and fault_finalize_stall_test; 128+N (stopped by
# signal, resumable) by preempt_cpu_test.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# job NAME [LAUNCHER FLAGS...] -- [TRAINER FLAGS...]: a one-epoch, two-rank job of the small
# CNN (synthetic data unless the launcher flags say otherwise); sets rc, its output in
# $out/NAME.log; checks the bound and that nothing is left.
job() {
  local name="$1"; shift
  local id="exitcodes-$name-$$-$RANDOM" start=$SECONDS
  local launcher_flags=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do launcher_flags+=("$1"); shift; done
  shift
  set +e
  timeout --signal=KILL 120 "$root/launcher/launcher" --np=2 --job_id="$id" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --data_threads=1 "${launcher_flags[@]}" -- \
    --model=small_cnn --image_size=16 --batch_size=8 --epochs=1 --log_every=1000 \
    --loss_log="$out/$name.loss" "$@" > "$out/$name.log" 2>&1
  rc=$?
  set -e
  echo "$name: exit $rc after $((SECONDS - start)) s"
  [[ $((SECONDS - start)) -le 60 ]] || { cat "$out/$name.log"; echo "FAIL: $name took more than 60 s"; exit 1; }
  assert_nothing_left "$id"
}

echo "== bad flags: 2"
job launcher_flag --np=0 -- --num_classes=4
expect_exit "$out/launcher_flag.log" 2 "$rc" "^launcher: .*--np" || exit 1
job trainer_flag --dataset=synthetic -- --num_classes=4 --epochs=x
expect_exit "$out/trainer_flag.log" 2 "$rc" "^trainer: --epochs" || exit 1

echo "== more classes than --num_classes: 65, before training"
job classes --dataset=synthetic --synthetic_samples=256 --synthetic_classes=10 -- --num_classes=4
expect_exit "$out/classes.log" 65 "$rc" \
  "^\[trainer rank [01] [^]]*\] E bad data \(exit 65\): OUT_OF_RANGE: .*the training dataset has 10 classes but the trainer has --num_classes=4" ||
  exit 1
[[ ! -s "$out/classes.loss" ]] || { cat "$out/classes.log"; echo "FAIL: it trained"; exit 1; }

echo "== more unusable files than --max_bad_fraction: 65"
folder="$out/bad_files"
"$python" - "$folder" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(0)
for c, name in enumerate(["a", "b"]):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(40):
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(
            os.path.join(root, name, f"{i:04d}.png"))
    for i in range(4):
        with open(os.path.join(root, name, f"broken{i}.jpg"), "wb") as f:
            f.write(b"not a jpeg at all")
PY
job bad_files --dataset=imagefolder --train_dir="$folder" \
  --data_service_args=--max_bad_fraction=0.001 -- --num_classes=2
expect_exit "$out/bad_files.log" 65 "$rc" \
  "\] E bad data \(exit 65\): .*too many unusable samples: .*the last was sample [0-9]+ \($folder/[ab]/broken[0-3]\.jpg\)" ||
  exit 1

echo "== a checkpoint that cannot be read: 74"
printf 'not a checkpoint' > "$out/garbage.ckpt"
job resume --dataset=synthetic --synthetic_samples=256 --synthetic_classes=4 -- \
  --num_classes=4 --resume="$out/garbage.ckpt"
expect_exit "$out/resume.log" 74 "$rc" \
  "^\[trainer rank 0 [^]]*\] E checkpoint I/O \(exit 74\): .*--resume=$out/garbage.ckpt: " || exit 1
echo "PASS"
