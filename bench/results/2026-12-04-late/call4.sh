#!/usr/bin/env bash
# One H200, main after call3 (the optimizer's step count advances on graph replays): the FP8
# resume check again (its final checkpoints differed in optimizer/steps_taken in call3), the
# captured-against-uncaptured and periodic-resume checks, then the adaptive GPU decode share of
# a rank that only takes batches (five fixed shares, then the ladder and the prior), with the
# controller that holds against the mean of its held windows.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-late/call4.sh
set -uo pipefail
b="$(pwd)/bundle"; out=/tmp/call4; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call4.tgz" --exclude='share_photos' --exclude='*.pt2' --exclude='*.stoker' \
  --exclude='*_ckpt' -C "$out" . ; }
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
STOKER_GPU_CHECKS='^(export_transformers|vit_b_16_fp8_resume_bitwise|graphs_bitwise_bf16|resume_periodic)$' \
  timeout 200 "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, |identical|differ" "$out/gpu_checks.txt" | cut -c1-200
elapsed; save
STOKER_GPU_CHECKS='^decode_share_converges_data_only$' timeout 240 "$b/bin/gpu.sh" checks "$out/share" \
  >"$out/share_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)" "$out/share_checks.txt"
grep -E "^fixed|images in|within 5%|converged|Error" "$out/share/decode_share_converges_data_only.log" | cut -c1-220
elapsed; save
