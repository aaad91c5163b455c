#!/usr/bin/env bash
# Validation counts every sample of the split exactly once when the world size does not
# divide it: 3 ranks, 100 validation samples (DistributedSampler pads to 102), batches of 7
# (each rank's last one short). The count comes from rank 0's metrics JSON lines.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test valcount

# The synthetic dataset's validation split is a tenth of --synthetic_samples.
run_synthetic_job 3 "$job" 1000 4 --model=small_cnn --image_size=16 --batch_size=16 --epochs=2 \
  --lr=0.05 --val_every=1 --val_batch_size=7 --metrics_jsonl="$out/metrics.jsonl" 2>&1 | tee "$out/log"
assert_nothing_left "$job"

"$(stoker_python)" - "$out/metrics.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
val = [r for r in records if r["type"] == "val"]
assert [r["epoch"] for r in val] == [1, 2], val
for r in val:
    assert r["samples"] == 100, f"validation counted {r['samples']} samples, not 100: {r}"
    assert 0 <= r["top5"] <= 1 and r["top1"] <= r["top5"], r
end = [r for r in records if r["type"] == "end"]
assert len(end) == 1 and end[0]["val_top1"] == val[-1]["top1"], end
print("each of the 100 validation samples counted once over 3 ranks; top-1", val[-1]["top1"])
PY
echo "PASS"
