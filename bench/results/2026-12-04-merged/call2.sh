#!/usr/bin/env bash
# Main after the day's merges, one H200: the GPU tests of the generated pointwise kernels, the
# layer norm in bf16, the conv + batch-norm graphs and the device timeline; the transformer
# checks (exported ViT-B/16, ConvNeXt-T and Swin-V2-T in bf16 with every rewrite against their
# fp32 plain graphs; ViT-B/16 in FP8 against bf16 over 100 steps); the kernel breakdowns of
# the three at batch 128, 224x224, bf16 (uncaptured profiled steps).
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-merged/call2.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call2; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call2.tgz" --exclude='*.pt2' --exclude='*.json.gz' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
for arch in vit_b_16 convnext_tiny swin_v2_t; do
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >"$out/export224_$arch.log" 2>&1 &
done
STOKER_GPU_CHECKS='^(layer_norm|pointwise_kernel|conv_bn_fusion|device_timeline|export_transformers|vit_b_16_|convnext_tiny_|swin_v2_t_)' \
  "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, |mean|within|over|worst" "$out/gpu_checks.txt" | head -60
elapsed; save; wait
BATCH=128 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/vit_b_16.pt2 \
  stoker:/tmp/swin_v2_t.pt2 stoker:/tmp/convnext_tiny.pt2 >"$out/kernels.log" 2>&1
grep -E "^== |exit|kernels over|span" "$out/kernels.log"
head -n 12 "$out"/kernels/*.txt
elapsed; save
