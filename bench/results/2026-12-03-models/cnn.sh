#!/usr/bin/env bash
# One short device call on one H200, after channels-last weights: the CNNs where Stoker led
# (efficientnet_b0 and mobilenet_v3_large exported, the built-in resnet50), batch 256, beside
# ../shared/bench/anchor_models.py (eager, then torch.compile default as time allows).
# Results are written to $OUT as they come. Run from the repository root with bundle/ carried.
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out="${OUT:-/tmp}"
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
for arch in efficientnet_b0 mobilenet_v3_large; do
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >"$out/export_$arch.log" 2>&1 &
done
wait
elapsed
train() {  # train NAME MODEL BATCH [FLAGS...]: 40 steps after 10 warm-up, images/s
  local name=$1 model=$2 batch=$3; shift 3
  "$b/stoker" trainer --device=cuda --model="$model" --num_classes=1000 --image_size=224 \
    --batch_size="$batch" --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4 \
    --synthetic_steps=50 --warmup_steps=10 --log_every=10 --metrics_out="$out/$name.json" "$@" \
    >"$out/$name.log" 2>&1
  echo "== $name: exit $? $(python3 -c "import json;m=json.load(open('$out/$name.json'));print('images/s', m.get('images_per_second'))" 2>&1) $(elapsed)" | tee -a "$out/summary.txt"
}
train stoker_efficientnet_b0 /tmp/efficientnet_b0.pt2 256
train stoker_mobilenet_v3_large /tmp/mobilenet_v3_large.pt2 256
train stoker_resnet50 resnet50 256
python3 "$b/anchors/anchor_models.py" --models efficientnet_b0:256,mobilenet_v3_large:256,resnet50:256 --modes eager 2>&1 |
  grep '"what"' | tee -a "$out/anchor_models.jsonl"
elapsed
python3 "$b/anchors/anchor_models.py" --models efficientnet_b0:256,mobilenet_v3_large:256 --modes compile 2>&1 |
  grep '"what"' | tee -a "$out/anchor_models.jsonl"
elapsed
