#!/usr/bin/env bash
# One H200, after call3's two test fixes: the generated pointwise kernels' and the device
# timeline's GPU tests again, then the adaptive GPU decode share's convergence from JPEG with no
# model (data only): five fixed shares, then two adaptive runs (the ladder, then the prior).
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-merged/call4.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call4; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call4.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.stoker' \
  --exclude='photos*' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
STOKER_GPU_CHECKS='^(pointwise_kernel|device_timeline)' "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, |^pointwise " "$out/gpu_checks.txt" | cut -c1-220 | head -40
elapsed; save
STOKER_GPU_CHECKS='^decode_share_converges_data_only$' "$b/bin/gpu.sh" checks "$out/share" >"$out/share_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, " "$out/share_checks.txt"
cat "$out/share/decode_share_converges_data_only.log" | grep -vE "^epoch" | tail -n 40 | cut -c1-200
elapsed; save
