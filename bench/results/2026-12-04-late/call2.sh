#!/usr/bin/env bash
# One H200, main as call1's: the GPU checks of the adaptive GPU decode share from JPEG (five
# fixed shares, then two adaptive runs: the ladder, then the prior; data only and ResNet-18),
# then digits from JPEG at decode shares 0 and 0.75 and with exact decoding (accuracy).
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-late/call2.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call2; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call2.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.stoker' \
  --exclude='share_photos' --exclude='digits*' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
STOKER_GPU_CHECKS='^(decode_share_converges_data_only|decode_share_converges_resnet18|digits_jpeg_)' \
  timeout 570 "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, " "$out/gpu_checks.txt"
for c in decode_share_converges_data_only decode_share_converges_resnet18; do
  grep -E "^fixed|images in|within 5%|converged|Error|ran " "$out/checks/$c.log" | cut -c1-250
done
cat "$out/checks/digits_jpeg_accuracy.log" 2>/dev/null | tail -n 8
elapsed; save
