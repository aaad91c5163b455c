#!/usr/bin/env bash
# Rerun of call1.sh's parts whose files did not come back (its archive was over the size
# limit): the layer_norm GPU test's log and the convnext_tiny kernel breakdowns (text only).
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call2; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call2.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.json' -C "$out" . ; }
python3 "$b/bin/export_model.py" torchvision.models:convnext_tiny --num_classes 1000 --image_size 224 \
  --out /tmp/convnext_tiny.pt2 >"$out/export_convnext_tiny.log" 2>&1 &
STOKER_GPU_CHECKS='^layer_norm' timeout 100 "$b/bin/gpu.sh" checks "$out/checks" > "$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, " "$out/gpu_checks.txt"; grep -E "max|bound|Failure|error" "$out/checks/layer_norm.log" | head -40
save; wait
BATCH=256 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/convnext_tiny.pt2 peer:convnext_tiny:compile >"$out/kernels_cnx.log" 2>&1
cat "$out"/kernels/*.txt; save
