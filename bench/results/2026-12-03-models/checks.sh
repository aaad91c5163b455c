#!/usr/bin/env bash
# The GPU checks of main after the duplicate clean-up (BUILD macros, shared test kit, flag
# grammar, shared element conversions and feeders' batch views), the lifted tensor
# constants, the kernel trace and channels-last weights, from its bundle through the one
# entry point. Run from the repository root with bundle/ carried.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 570 bundle/bin/gpu.sh checks /tmp/checks > /tmp/gpu_checks.txt 2>&1
echo "gpu.sh checks exit $?"
cat /tmp/gpu_checks.txt
cp /tmp/gpu_checks.txt "${OUT:-/tmp}/"
tar czf "${OUT:-/tmp}/checks_logs.tgz" --exclude='*.pt2' --exclude='params*' -C /tmp checks
