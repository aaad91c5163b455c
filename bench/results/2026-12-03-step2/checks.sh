#!/usr/bin/env bash
# The GPU checks of main with the self-attention and layer-norm rewrites, asynchronous
# checkpoints, elastic resume and the GPU decode under the bad-data policy, from its
# bundle through the one entry point. Run from the repository root with bundle/ carried.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 560 bundle/bin/gpu.sh checks /tmp/checks > /tmp/gpu_checks.txt 2>&1
echo "gpu.sh checks exit $?"
grep -E "^(PASS|FAIL|SKIP)|passed, " /tmp/gpu_checks.txt | tail -60
cp /tmp/gpu_checks.txt "${OUT:-/tmp}/"
tar czf "${OUT:-/tmp}/checks_logs.tgz" --exclude='*.pt2' --exclude='params*' --exclude='*.jpg' -C /tmp checks
