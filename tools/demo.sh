#!/usr/bin/env bash
# The README's demo command: installs what is missing (tools/setup.sh), builds the three
# programs, and trains end to end on real data: scikit-learn's handwritten digits written
# as an ImageFolder of PNGs (tools/make_digits.py: 1437 training and 360 validation images,
# 32x32), served by one data service to 2 trainer ranks under mpirun (on GPUs if there are
# two, else on the CPU), the small CNN with validation, progress on the terminal. At the
# end it prints the validation accuracy reached and where the run's curve (a PNG drawn by
# tools/plot_metrics.py) and its TensorBoard files are, under a fresh
# /tmp/stoker-demo.XXXXXX. Extra arguments go to the trainer after the demo's own, so they
# win (`tools/demo.sh --epochs=1`). Exits with the launcher's code when training fails,
# removing its folder; the launcher leaves no process, socket or /dev/shm segment behind
# either way.
set -euo pipefail
cd "$(dirname "$0")/.."
STOKER_SETUP_QUIET=1 tools/setup.sh
bazel build //launcher //trainer //data_service
# Open MPI refuses to run as root unless told; the demo says so for the user.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1 NCCL_NVLS_ENABLE=0
python="${STOKER_PYTHON:-python3}"
out=$(mktemp -d /tmp/stoker-demo.XXXXXX)
"$python" tools/make_digits.py "$out/digits" > /dev/null

set +e
bazel-bin/launcher/launcher \
  --np=2 \
  --dataset=imagefolder --train_dir="$out/digits/train" --val_dir="$out/digits/val" \
  --data_threads=1 \
  -- \
  --model=small_cnn --num_classes=10 --image_size=32 --batch_size=32 --epochs=15 \
  --optimizer=sgd --lr=0.2 --nesterov --weight_decay=5e-4 --no_decay_bn_bias \
  --lr_schedule=cosine --warmup_epochs=1 --val_every=3 --log_every=11 \
  --metrics_jsonl="$out/metrics.jsonl" --tensorboard_dir="$out/tensorboard" "$@"
rc=$?
set -e
[[ $rc -eq 0 ]] || { rm -rf "$out"; exit "$rc"; }

"$python" tools/plot_metrics.py "$out/metrics.jsonl" "$out/curve.png" \
  --title "tools/demo.sh: scikit-learn digits, small CNN, 2 ranks"
"$python" - "$out/metrics.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
val = [r for r in records if r["type"] == "val"]
if val:
    last = val[-1]
    print(f"demo: validation top-1 {100 * last['top1']:.1f}% (top-5 {100 * last['top5']:.1f}%) "
          f"on {last['samples']} digits after epoch {last['epoch']}")
else:
    print("demo: no validation ran (--val_every=0?)")
PY
echo "demo: curve $out/curve.png"
echo "demo: TensorBoard files in $out/tensorboard (tensorboard --logdir $out/tensorboard)"
