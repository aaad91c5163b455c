#!/usr/bin/env bash
# The GPU checks of the restructured tree (rooms with visibility walls, the graph builder in
# stages, the programs' options, the shared test kit, every C++ file formatted), from its
# bundle through the one entry point. Run from the repository root with bundle/ carried.
set -uo pipefail
export PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 560 bundle/bin/gpu.sh checks /tmp/checks > /tmp/gpu_checks.txt 2>&1
echo "gpu.sh checks exit $?"
cat /tmp/gpu_checks.txt
cp /tmp/gpu_checks.txt "${OUT:-/tmp}/"
tar czf "${OUT:-/tmp}/checks_logs.tgz" -C /tmp checks
