#!/usr/bin/env bash
# Bad datasets, end to end (launcher, data service, trainer on the CPU):
#  - a folder with unusable files of every kind, a name that is not UTF-8, a dangling and
#    a looping file symlink, and files beside the class folders: the run trains, each bad
#    file is warned about once and counted as a replaced sample, the stray files are named;
#    a bad file whose name holds a newline is named escaped ("\n"), forging no log line;
#  - folders that cannot be a dataset (empty, only files, an empty class folder, a symlink
#    loop): the job fails before training with an error naming the folder at fault;
#  - the dataset folder vanishes mid-epoch: the job fails within a bounded time with a
#    message that says the folder is gone (not a flood of skipped samples, not a hang).
# Every job leaves nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

make_folder() {  # make_folder DIR IMAGES_PER_CLASS: classes a and b of small PNGs
  "$python" - "$1" "$2" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
for c, name in enumerate(["a", "b"]):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(n):
        pixels = rng.integers(0, 60, (24, 24, 3), dtype=np.uint8)
        pixels[..., c] += 150
        Image.fromarray(pixels).save(os.path.join(root, name, f"{i:04d}.png"))
PY
}

run() {  # run NAME TRAIN_DIR [trainer flags...]; sets $rc
  local name="$1" dir="$2"; shift 2
  local job="badinput-$name-$$-$RANDOM"
  set +e
  timeout 300 "$root/launcher/launcher" --np=1 --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=imagefolder --train_dir="$dir" --data_threads=1 -- \
    --model=small_cnn --num_classes=2 --image_size=16 --batch_size=8 --lr=0.05 --log_every=1000 \
    "$@" > "$out/$name.log" 2>&1
  rc=$?
  set -e
  assert_nothing_left "$job"
}

expect_failure() {  # expect_failure NAME PATTERN: the job failed and its log matches PATTERN
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$out/$1.log"; echo "FAIL: $1 should fail, got exit $rc"; exit 1; }
  grep -E -- "$2" "$out/$1.log" > "$out/$1.match" ||
    { cat "$out/$1.log"; echo "FAIL: $1: no line matches: $2"; exit 1; }
  echo "$1: exit $rc: $(head -c 400 "$out/$1.match" | head -n 1)"
}

# ---- A messy but usable folder: bad files are skipped and counted.
messy="$out/messy"
make_folder "$messy" 40
printf 'not a jpeg at all' > "$messy/a/corrupt.jpg"
: > "$messy/a/empty.png"
head -c 300 "$messy/b/0000.png" > "$messy/b/truncated.png"
cp "$messy/b/0001.png" "$messy/b/$(printf 'caf\xe9-\xff.png')"  # not UTF-8; loads
ln -s "$messy/nowhere.png" "$messy/a/dangling.png"
ln -s loop.png "$messy/b/loop.png"
printf 'not a jpeg either' > "$messy/b/"$'forged\n[data_service node 0 12:00:00.000] E forged.jpg'
echo "labels" > "$messy/README.txt"   # beside the class folders: not a class
run messy "$messy" --epochs=1 --loss_log="$out/messy.txt"
[[ $rc -eq 0 ]] || { cat "$out/messy.log"; echo "FAIL: the messy folder should train, exit $rc"; exit 1; }
for bad in corrupt.jpg empty.png truncated.png dangling.png loop.png; do
  n=$(grep -c "unusable .*/$bad" "$out/messy.log" || true)
  [[ $n -eq 1 ]] || { grep unusable "$out/messy.log"; echo "FAIL: $bad warned about $n times, want once"; exit 1; }
done
grep -q 'README.txt' "$out/messy.log" || { echo "FAIL: the stray file is not named"; exit 1; }
# A newline in a file name prints escaped: one warning line, no forged line.
grep -qF 'b/forged\n[data_service node 0 12:00:00.000] E forged.jpg): ' "$out/messy.log" ||
  { grep unusable "$out/messy.log"; echo "FAIL: the name with a newline is not printed escaped"; exit 1; }
if grep -q '^\[data_service node 0 12:00:00.000\] E forged' "$out/messy.log"; then
  echo "FAIL: a file name forged a log line"; exit 1
fi
grep -i "replaced\|skipped" "$out/messy.log" | tail -n 2
# 87 samples (80, the Latin-1 copy and 6 bad ones, each replaced) make 10 full batches.
[[ $(wc -l < "$out/messy.txt") -eq 10 ]] || { echo "FAIL: expected 10 steps, got $(wc -l < "$out/messy.txt")"; exit 1; }

# ---- Folders that are not datasets: refused before training, naming what is wrong.
mkdir -p "$out/empty"
run empty "$out/empty" --epochs=1
expect_failure empty "$out/empty has no class sub-folders .*it is empty"

mkdir -p "$out/only_files"; touch "$out/only_files/cat" "$out/only_files/dog.png"
run only_files "$out/only_files" --epochs=1
expect_failure only_files "only 2 file\(s\), which are not classes"

make_folder "$out/empty_class" 4; mkdir -p "$out/empty_class/c/sub"; touch "$out/empty_class/c/notes.txt"
run empty_class "$out/empty_class" --epochs=1
expect_failure empty_class "no image file for the classes c "

make_folder "$out/loop" 4; ln -s .. "$out/loop/a/up"
run loop "$out/loop" --epochs=1
expect_failure loop "symlink loop in the image folder: $out/loop/a/up -> \.\. leads back to $out/loop, which contains it"

# ---- The folder vanishes mid-epoch.
gone="$out/vanishing"
make_folder "$gone" 200
job="badinput-vanish-$$-$RANDOM"
start=$SECONDS
timeout 300 "$root/launcher/launcher" --np=1 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=imagefolder --train_dir="$gone" --data_threads=1 -- \
  --model=small_cnn --num_classes=2 --image_size=16 --batch_size=8 --lr=0.05 --log_every=1000 \
  --epochs=100 --loss_log="$out/vanish.txt" > "$out/vanish.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  [[ -s "$out/vanish.txt" && $(wc -l < "$out/vanish.txt") -ge 5 ]] && break
  kill -0 $launcher 2>/dev/null || break
  sleep 0.1
done
mv "$gone" "$gone.moved" && rm -rf "$gone.moved"
echo "removed $gone after $(wc -l < "$out/vanish.txt") steps"
set +e
wait $launcher
rc=$?
set -e
echo "the job ended $(( SECONDS - start )) s after its start"
assert_nothing_left "$job" $launcher
expect_failure vanish "the image folder $gone is gone \(No such file or directory\); it was listed at start with 400 samples"
steps=$(wc -l < "$out/vanish.txt")
[[ $steps -lt 2500 ]] || { echo "FAIL: trained the whole run ($steps steps) without its data"; exit 1; }
if grep -q "unusable sample" "$out/vanish.log"; then
  echo "FAIL: a vanished folder was treated as bad files"; grep "unusable sample" "$out/vanish.log" | head -n 3; exit 1
fi
grep "shutting down" "$out/vanish.log" | grep -q "replaced 0, unusable files 0" ||
  { grep "shutting down" "$out/vanish.log"; echo "FAIL: samples were replaced"; exit 1; }
echo "PASS"
