#!/usr/bin/env bash
# One H200, call3's bundle: the adaptive GPU decode share of a rank that only takes batches
# (five fixed shares, then the ladder and the prior), with the controller that holds against
# the mean of its held windows.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-late/call4.sh
set -uo pipefail
b="$(pwd)/bundle"; out=/tmp/call4; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call4.tgz" --exclude='share_photos' -C "$out" . ; }
t0=$(date +%s)
STOKER_GPU_CHECKS='^decode_share_converges_data_only$' timeout 300 "$b/bin/gpu.sh" checks "$out/share" \
  >"$out/share_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)" "$out/share_checks.txt"
grep -E "^fixed|images in|within 5%|converged|Error" "$out/share/decode_share_converges_data_only.log" | cut -c1-220
echo "[$(( $(date +%s) - t0 )) s]"; save
