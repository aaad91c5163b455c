#!/usr/bin/env bash
# One device call on one H200: checkpoint cost. bench_gpu.py's checkpoint phase (ResNet-50
# and an exported ViT-B/16: a checkpoint every 50 steps, asynchronous and synchronous,
# against none), then a 1.0-billion-parameter ViT (torchvision's VisionTransformer, 40
# layers of width 1408: 12 GB of fp32 weights and AdamW state) trained with an
# asynchronous checkpoint every 50 steps, each checkpoint's stall from --metrics_jsonl.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-03-step2/checkpoint.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/ckpt; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/checkpoint.tgz" --exclude='ckpt_*' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
python3 "$b/bin/export_model.py" torchvision.models:VisionTransformer --num_classes 1000 \
  --image_size 224 --out /tmp/vit_1b.pt2 --kwargs '{"image_size": 224, "patch_size": 14,
  "num_layers": 40, "num_heads": 16, "hidden_dim": 1408, "mlp_dim": 6144}' \
  >"$out/export_vit_1b.log" 2>&1 &
python3 "$b/bin/bench_gpu.py" --phase checkpoint --out "$out" \
  --checkpoint_models=resnet50:256,exported_vit_b_16:128 2>&1 | grep -v "^$" | tail -30
elapsed; save
wait
rm -rf /tmp/ck1b
"$b/stoker" trainer --device=cuda --model=/tmp/vit_1b.pt2 --num_classes=1000 --image_size=224 \
  --batch_size=16 --precision=bf16 --optimizer=adamw --lr=1e-4 --synthetic_steps=160 \
  --warmup_steps=10 --log_every=20 --checkpoint_dir=/tmp/ck1b --checkpoint_every_steps=50 \
  --checkpoint_every_epochs=0 --keep_checkpoints=1 --resume=none --checkpoint_async \
  --metrics_jsonl="$out/vit_1b.jsonl" --metrics_out="$out/vit_1b.json" >"$out/vit_1b.log" 2>&1
echo "vit_1b exit $?"
grep -h '"checkpoint"' "$out/vit_1b.jsonl" | head -5
grep -h "checkpoint" "$out/vit_1b.log" | tail -6
ls -la /tmp/ck1b | head
elapsed; save
