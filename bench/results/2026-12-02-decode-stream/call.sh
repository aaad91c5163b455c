#!/usr/bin/env bash
# One device call: the GPU checks of the input path, then decode_stream.py.
# Usage (repository root, on the GPU host): call.sh OUT [CHECKS_REGEX] [SHARES]
set -uo pipefail
out="$1"; here="$(dirname "$0")"
export PYTHONUNBUFFERED=1
STOKER_GPU_CHECKS="${2:-^(cuda_batch_feeder|gpu_jpeg_decoder|gpu_jpeg_decoder_ran|decode_share_deterministic|decode_share_adaptive)$}" \
  bundle/bin/gpu_checks.sh /tmp/checks > /tmp/checks.txt 2>&1
cat /tmp/checks.txt
python3 "$here/decode_stream.py" /tmp/bench ${3:-} > /tmp/bench_out.txt 2>&1
grep -E "^\[bench [0-9:]+\] (share|auto)" /tmp/bench_out.txt
cp /tmp/checks.txt /tmp/bench_out.txt "$out/"
cp /tmp/bench/bench.jsonl "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp checks bench \
  $(cd /tmp && find stoker_bench_runs -size -4M \( -name '*.jsonl' -o -name '*.json' \))
