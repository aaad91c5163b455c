#!/usr/bin/env bash
# One whole check on the GPU host, from the repository root with bundle/ carried
# (tools/bundle.sh): the GPU tests, then the benchmarks, logs and results under OUT.
#   tools/device_check.sh OUT STEP...    STEP: checks, data_service, one_gpu, one_gpu_anchor,
#                                        profile, two_gpu, report
# BENCH_ARGS (e.g. --quick) goes to every benchmark step.
# Prints a short summary per step; the whole output of each is in OUT.
set -uo pipefail
out="$1"; shift
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi -L
# The CPUs (cores, threads per core, NUMA): the data service's figures depend on them.
lscpu > "$out/lscpu.txt" 2>&1
grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)" "$out/lscpu.txt"
for step in "$@"; do
  echo "=== $step ($(date +%T))"
  case "$step" in
    checks)
      bundle/bin/gpu_checks.sh /tmp/stoker-gpu-checks > "$out/gpu_checks.log" 2>&1
      echo "gpu checks: exit $?"
      grep -E "^(PASS|FAIL|SKIP|[0-9]+ passed)" "$out/gpu_checks.log" ;;
    report)
      python3 bundle/bin/bench_gpu.py --phase report --out "$out" ;;
    *)
      python3 bundle/bin/bench_gpu.py --phase "$step" --out "$out" ${BENCH_ARGS:-} |
        grep -E '^\[bench [0-9:]+\] (\{"who"|exit)' | cut -c1-400 ;;
  esac
done
