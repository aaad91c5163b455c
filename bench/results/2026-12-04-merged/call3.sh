#!/usr/bin/env bash
# Main after the fixes of call2's failures, one H200: the generated pointwise kernels' and the
# device timeline's GPU tests; the checkpoint checks (snapshot buffers, periodic asynchronous
# checkpoints resumed bit for bit); a traced ResNet-50 job from JPEG, checked and drawn
# (gpu.sh trace); the checkpoint cost phase for ResNet-50 and exported ViT-B/16.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-merged/call3.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call3; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call3.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.json' \
  --exclude='*.stoker' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
STOKER_GPU_CHECKS='^(pointwise_kernel|device_timeline|snapshot_buffers|resume_periodic|resume_bitwise$|graphs_bitwise_bf16)' \
  "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, |identical|^pointwise " "$out/gpu_checks.txt" | cut -c1-220 | head -40
elapsed; save
"$b/bin/gpu.sh" trace "$out/trace" >"$out/trace.txt" 2>&1
grep -vE "^epoch" "$out/trace.txt" | cut -c1-220 | tail -n 30
elapsed; save
python3 "$b/bin/bench_gpu.py" --phase checkpoint --checkpoint_models resnet50:256,exported_vit_b_16:128 \
  --out "$out/checkpoint" >"$out/checkpoint.txt" 2>&1
tail -n 25 "$out/checkpoint.txt" | cut -c1-250
elapsed; save
