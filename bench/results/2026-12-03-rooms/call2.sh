#!/usr/bin/env bash
# The precision checks again (the first call's precision_tracks_fp32 missed its 5%), in a
# second device call from the same bundle.
set -uo pipefail
STOKER_GPU_CHECKS='^precision' timeout 170 bundle/bin/gpu.sh checks /tmp/checks > /tmp/gpu_checks_precision.txt 2>&1
echo "exit $?"; cat /tmp/gpu_checks_precision.txt; cp /tmp/gpu_checks_precision.txt "${OUT:-/tmp}/"
