#!/usr/bin/env bash
# Main at 75a4256 before this round's rewrites: the transformer checks (exported ViT-B/16,
# ConvNeXt-T and Swin-V2-T in bf16 with the rewrites against their fp32 plain graphs), and the
# kernel breakdowns of ViT-B/16 and Swin-V2-T (batch 128, 224x224) that the changes are
# measured against.
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call0; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call0.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.json' -C "$out" . ; }
nvidia-smi -L
start=$(date +%s)
for arch in vit_b_16 swin_v2_t; do
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >"$out/export224_$arch.log" 2>&1 &
done
STOKER_GPU_CHECKS='^(export_transformers|vit_b_16_|convnext_tiny_|swin_v2_t_)' \
  "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, |mean|within|over" "$out/gpu_checks.txt" | head -40
echo "[$(( $(date +%s) - start )) s]"; save; wait
BATCH=128 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/vit_b_16.pt2 \
  stoker:/tmp/swin_v2_t.pt2 >"$out/kernels.log" 2>&1
grep -E "^== |exit|kernels over|span" "$out/kernels.log"
echo "[$(( $(date +%s) - start )) s]"; save
