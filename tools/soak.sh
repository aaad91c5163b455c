#!/usr/bin/env bash
# Soak run: trains the small CNN on the CPU with 2 ranks for many short epochs on a
# small generated ImageFolder (scikit-learn's digits, tools/make_digits.py, every other
# training image re-encoded as JPEG so both decoders run), validating every epoch, while
# tools/plot_soak.py samples every second the resident memory of the data service and of
# each trainer rank and the job's /dev/shm use. Writes, under --out:
#   soak.csv  one row per epoch (the largest sample of each series in it)
#   soak.png  the chart;  soak_samples.csv  every sample;  soak.log  the run's log
# and prints first/last/max per process with the verdict: flat when no series grows by 5%
# or more after epoch 2. Exit 0 only when the run succeeds and everything stays flat.
#
#   tools/soak.sh [--epochs=40] [--out=bench/results/2026-11-30-soak] [--bin_dir=DIR]
#
# --bin_dir holds launcher/launcher, trainer/trainer and data_service/data_service (default:
# `bazel info bazel-bin`; build them first with `bazel build //launcher //trainer //data_service`).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
epochs=40
out="$root/bench/results/2026-11-30-soak"
bin_dir=""
for arg in "$@"; do
  case "$arg" in
    --epochs=*) epochs="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --bin_dir=*) bin_dir="${arg#*=}" ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "tools/soak.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$epochs" =~ ^[0-9]+$ && "$epochs" -ge 4 ]] ||
  { echo "tools/soak.sh: --epochs must be an integer >= 4, got $epochs" >&2; exit 2; }
[[ -n "$bin_dir" ]] || bin_dir="$(cd "$root" && bazel info bazel-bin 2>/dev/null)"
for program in launcher/launcher trainer/trainer data_service/data_service; do
  [[ -x "$bin_dir/$program" ]] ||
    { echo "tools/soak.sh: $bin_dir/$program not found (--bin_dir; bazel build it first)" >&2; exit 2; }
done
python="${STOKER_PYTHON:-python3}"
source "$root/tests/mpi_env.sh"
mkdir -p "$out"
work=$(mktemp -d /tmp/stoker-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_orte_tmpdir_base="$work" OMPI_MCA_btl_vader_backing_directory="$work"
job="soak-$$-$RANDOM"

"$python" "$root/tools/make_digits.py" "$work/digits" --size 32 > /dev/null
"$python" - "$work/digits/train" <<'PY'
import pathlib, sys
from PIL import Image
for i, png in enumerate(sorted(pathlib.Path(sys.argv[1]).glob("*/*.png"))):
    if i % 2 == 0:
        Image.open(png).convert("RGB").save(png.with_suffix(".jpg"), quality=90)
        png.unlink()
PY
echo "soak: job $job, $epochs epochs, ImageFolder $(find "$work/digits/train" -name '*.jpg' | wc -l) JPEG + $(find "$work/digits/train" -name '*.png' | wc -l) PNG training images, $(find "$work/digits/val" -type f | wc -l) validation images"

"$python" "$root/tools/plot_soak.py" sample --job="$job" --loss_log="$work/loss.txt" \
  --out="$out/soak_samples.csv" --interval=1 &
sampler=$!
start=$SECONDS
set +e
"$bin_dir/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$bin_dir/trainer/trainer" --data_service="$bin_dir/data_service/data_service" \
  --dataset=imagefolder --train_dir="$work/digits/train" --val_dir="$work/digits/val" \
  --data_threads=1 -- \
  --model=small_cnn --num_classes=10 --image_size=32 --batch_size=32 --epochs="$epochs" \
  --optimizer=sgd --lr=0.1 --lr_schedule=cosine --val_every=1 --log_every=100 \
  --checkpoint_dir="$work/ckpt" --checkpoint_every_epochs=5 --keep_checkpoints=2 \
  --loss_log="$work/loss.txt" --metrics_jsonl="$work/metrics.jsonl" > "$out/soak.log" 2>&1
rc=$?
set -e
wait "$sampler" || { echo "soak: the sampler failed"; exit 1; }
echo "soak: the job ran $((SECONDS - start)) s and exited $rc"
tail -n 3 "$out/soak.log"
[[ "$rc" -eq 0 ]] || { echo "soak: FAIL: the job failed (see $out/soak.log)"; exit 1; }
left=$(ls /dev/shm | grep -F "stoker.$job." || true)
[[ -z "$left" ]] || { echo "soak: FAIL: segments left: $left"; exit 1; }
"$python" "$root/tools/plot_soak.py" report "$out/soak_samples.csv" --csv="$out/soak.csv" \
  --png="$out/soak.png" \
  --title="Stoker soak: small CNN, 2 CPU ranks, digits ImageFolder (JPEG+PNG), $epochs epochs"
