#!/usr/bin/env bash
# One device call on one H200: vit_b_16 and convnext_tiny exported and trained by Stoker
# (fused blocks on: the self-attention and layer-norm rewrites; and off), a kernel breakdown
# of vit_b_16, then ../shared/bench/anchor_models.py in the same call (eager, torch.compile
# default and reduce-overhead, fused AdamW). Synthetic batches, bf16, channels_last, AdamW,
# 224x224, 1000 classes.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-03-step2/table.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/table; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/table.tgz" -C "$out" . ; }  # after each phase: a cut call keeps what ran
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
for arch in vit_b_16 convnext_tiny; do
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
train stoker_vit_b_16 /tmp/vit_b_16.pt2 128
train stoker_vit_b_16_nofused /tmp/vit_b_16.pt2 128 --nofused_blocks
train stoker_convnext_tiny /tmp/convnext_tiny.pt2 256
train stoker_convnext_tiny_nofused /tmp/convnext_tiny.pt2 256 --nofused_blocks
BATCH=128 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/vit_b_16.pt2 >"$out/kernels.log" 2>&1
grep -E "kernels over|busy" "$out"/kernels/*.txt
elapsed; save
python3 "$b/anchors/anchor_models.py" --models vit_b_16:128 --modes eager,compile,reduce-overhead 2>&1 |
  grep '"what"' | tee "$out/anchor_vit.jsonl"
elapsed; save
python3 "$b/anchors/anchor_models.py" --models convnext_tiny:256 --modes eager,compile,reduce-overhead 2>&1 |
  grep '"what"' | tee "$out/anchor_convnext.jsonl"
elapsed; save
