#!/usr/bin/env bash
# One device call on one H200, after channels-last weights: shufflenet_v2_x1_0 (Stoker with
# the fused blocks on and off against PyTorch eager, the anchor's recipe in
# tools/profile_peer.py), then vit_b_16 and swin_v2_t exported and trained by Stoker beside
# ../shared/bench/anchor_models.py (torch.compile default mode, fused AdamW) in the same call.
# Synthetic batches, bf16, channels_last, AdamW, 224x224, 1000 classes.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-03-models/table.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/table; mkdir -p "$out"
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
for arch in shufflenet_v2_x1_0 vit_b_16 swin_v2_t; do
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
  echo "== $name: exit $? $(python3 -c "import json;m=json.load(open('$out/$name.json'));print('images/s', m.get('images_per_second'))" 2>&1) $(elapsed)"
}
train stoker_shufflenet /tmp/shufflenet_v2_x1_0.pt2 256
train stoker_shufflenet_unfused /tmp/shufflenet_v2_x1_0.pt2 256 --nofused_blocks
BATCH=256 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/shufflenet_v2_x1_0.pt2 peer:shufflenet_v2_x1_0:eager
elapsed
train stoker_vit_b_16 /tmp/vit_b_16.pt2 128
train stoker_swin_v2_t /tmp/swin_v2_t.pt2 128
python3 "$b/anchors/anchor_models.py" --models vit_b_16:128,swin_v2_t:128 --modes eager,compile 2>&1 |
  grep '"what"' | tee "$out/anchor_models.jsonl"
elapsed
rm -f "$out"/kernels/*.json
tar czf "${OUT:-/tmp}/table.tgz" -C "$out" .
