#!/usr/bin/env bash
# One H200, main after the day's last merges (its bundle): GPU checks of what changed since
# call1 and call2 (FP8 scaling state in checkpoints: an FP8 run resumed bit for bit; the
# shared float-dtype mapping in the fused kernels; the snapshot of the FP8 state) and resume
# bit for bit; then the kernel breakdown of exported Swin-V2-T by program call and operator
# (--kernel_trace_ops).
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-late/call3.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call3; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call3.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.stoker' \
  --exclude='share_photos' --exclude='*_ckpt' --exclude='kernels/*.json' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
python3 "$b/bin/export_model.py" torchvision.models:swin_v2_t --num_classes 1000 --image_size 224 \
  --out /tmp/swin_v2_t.pt2 >"$out/export_swin_v2_t.log" 2>&1 &
STOKER_GPU_CHECKS='^(export_transformers|vit_b_16_fp8_resume_bitwise|fused_blocks|fused_blocks_ran|layer_norm|layer_norm_ran|snapshot_buffers|snapshot_buffers_ran|resume_bitwise)$' \
  timeout 330 "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, |identical|bit for bit" "$out/gpu_checks.txt" | cut -c1-200
elapsed; save
wait
BATCH=128 PROFILE_STEPS=2 timeout 120 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/swin_v2_t.pt2:--kernel_trace_ops \
  >"$out/kernels.log" 2>&1
grep -A 25 "by program call" "$out"/kernels/*.txt | cut -c1-200
elapsed; save
