#!/usr/bin/env bash
# Main after the day's merges, one H200: the new kernels' GPU tests (layer norm in bf16,
# generated pointwise kernels, FP8 linear layers, conv + batch-norm graphs, snapshot buffers,
# device timeline), then exported ViT-B/16, ConvNeXt-T and Swin-V2-T trained by Stoker (ViT
# also with --precision=fp8) and ../shared/bench/anchor_models.py in the same call (eager,
# torch.compile default and reduce-overhead, fused AdamW). Synthetic batches, bf16,
# channels_last, AdamW, 224x224, 1000 classes.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-merged/call1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call1; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call1.tgz" --exclude='*.pt2' --exclude='*.json.gz' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
for arch in vit_b_16 convnext_tiny swin_v2_t; do
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >"$out/export_$arch.log" 2>&1 &
done
STOKER_GPU_CHECKS='^(layer_norm|pointwise_kernel|fp8_linear|conv_bn_fusion|device_timeline|snapshot_buffers|self_attention)' \
  "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, " "$out/gpu_checks.txt"
elapsed; save
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
train stoker_vit_b_16_fp8 /tmp/vit_b_16.pt2 128 --precision=fp8
train stoker_convnext_tiny /tmp/convnext_tiny.pt2 256
train stoker_swin_v2_t /tmp/swin_v2_t.pt2 128
grep -hE "pointwise|runs as its ATen|precision=fp8|fused" "$out"/stoker_*.log | head -20
save
for m in vit_b_16:128 convnext_tiny:256 swin_v2_t:128; do
  python3 "$b/anchors/anchor_models.py" --models "$m" --modes eager,compile,reduce-overhead 2>&1 |
    grep '"what"' | tee "$out/anchor_${m%%:*}.jsonl"
  elapsed; save
done
