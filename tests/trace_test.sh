#!/usr/bin/env bash
# One trace of the whole job and a verdict on every traced step, on 3 CPU ranks, each its
# own "node" (--ranks_per_node=1) with its own data service, under the launcher's hosts
# mode with --trace:
#  1. rank 2 sleeps in each step (STOKER_TEST_SLOW_RANK, a test-only seam): the verdicts
#     name rank 2, a straggler in compute;
#  2. node 1's data service waits before each decode (STOKER_TEST_SLOW_DECODE, test-only):
#     the verdicts name rank 1, on node 1, waiting for input.
# The model is small, so that the injected delays stand out from a loaded machine's noise.
# Each time the launcher merges the job's trace: the merged JSON must pass the trace-event
# checker (fields, nesting per thread, paired flows received after they were sent on the
# merged clock: rank 0's clock pings and every batch from a data service to its rank; every
# bucket reduction issued, reduced inside backward, in bucket order, on every rank) with
# every rank's and data service's events, and tools/trace_timeline.py draws it as a PNG.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# run_traced NAME: a traced job, its output in $out/NAME.log, trace in $out/NAME.
run_traced() {
  local name="$1" id="trace$1-$$-$RANDOM"
  # 3 ranks x 8 x 12 steps: one epoch; steps 5..10 traced (the rings' first batches were
  # decoded before training started).
  timeout --signal=KILL 300 "$root/launcher/launcher" --hosts=localhost:3 --job_id="$id" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples=288 --synthetic_classes=4 --data_threads=1 \
    --trace="$out/$name" --trace_steps=5:11 -- \
    --ranks_per_node=1 --model=small_cnn --num_classes=4 --image_size=16 --batch_size=8 \
    --epochs=1 --warmup_steps=2 --log_every=2 --progress=lines \
    --metrics_jsonl="$out/$name.jsonl" 2>&1 | tee "$out/$name.log"
  grep -q "job $id finished" "$out/$name.log" || { echo "FAIL: job $name did not finish"; exit 1; }
  assert_nothing_left "$id"
}

# check_verdicts NAME BOUND RANK STAGE: most traced steps, and the summary, name RANK's STAGE
# as bounding the step (BOUND), in the log and in --metrics_jsonl.
check_verdicts() {
  "$python" - "$out/$1.jsonl" "$2" "$3" "$4" <<'PY'
import json, sys
path, bound, rank, stage = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
records = [json.loads(line) for line in open(path)]
steps = [r for r in records if r["type"] == "trace_step"]
summary = [r for r in records if r["type"] == "trace_verdict"]
assert len(steps) == 6, "expected 6 traced steps' verdicts, got %d" % len(steps)
named = [s for s in steps if s["bound"] == bound and s.get("rank") == rank and s["stage"] == stage]
for s in steps:
    print("  " + s["text"])
assert len(named) >= 4, "only %d of 6 verdicts name rank %d's %s (%s)" % (len(named), rank, stage, bound)
assert all(s["excess_ms"] > 20 for s in named), "excess too small"
assert len(summary) == 1, "no summary verdict"
s = summary[0]
assert (s["bound"], s["rank"], s["stage"]) == (bound, rank, stage), "summary: %s" % s["text"]
print("verdicts: %d of 6 steps and the summary name rank %d, %s (%s): %s" %
      (len(named), rank, stage, bound, s["text"]))
PY
  grep -q "trace verdict over 6 steps: bound by $2" "$out/$1.log" ||
    { echo "FAIL: rank 0 did not print the summary verdict"; exit 1; }
  grep -q "  bound $2  " "$out/$1.log" ||
    { echo "FAIL: the progress line does not show the job's bound ($2)"; exit 1; }
}

# check_trace NAME: the merged trace of job NAME is valid, on one clock, and drawn.
check_trace() {
  local merged="$out/$1/job_trace.json"
  [[ -s "$merged" ]] || { echo "FAIL: the launcher did not merge the trace into $merged"; exit 1; }
  ls "$out/$1"
  # 3 ranks x 6 traced steps, each reducing every bucket once.
  "$python" "$root/tests/check_trace.py" "$merged" --ranks=3 --data_services=3 \
    --min_bucket_reductions=18
  "$python" - "$merged" <<'PY'
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
need = {"forward", "backward", "optimizer", "data wait", "copy", "stop vote", "sample"}
seen = {e["name"] for e in events if e["ph"] == "X"}
assert need <= seen, "missing slices: %s" % (need - seen)
assert any(e["name"].startswith("bucket ") and e["name"].endswith(" reduction") for e in events)
assert any(e["name"].startswith("slot filled") for e in events)
flows = {e["name"] for e in events if e["ph"] == "f"}
assert {"ping", "batch"} <= flows, "flows: %s" % flows
samples = [e for e in events if e["name"] == "sample" and e["ph"] == "X"]
assert all({"file", "bytes", "decode_ms", "resize_ms"} <= set(e["args"]) for e in samples)
for pid in (0, 1, 2):
    assert "rank %d on " % pid in names[pid], names[pid]
print("one clock: %d processes, %d samples traced, max clock error %s us" %
      (len(names), len(samples), trace["stoker"]["max_clock_error_us"]))
PY
  "$python" "$root/tools/trace_timeline.py" "$merged" "$out/$1.png" --steps=3
  "$python" - "$out/$1.png" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, "not a drawn PNG"
print("timeline PNG: %d bytes" % len(data))
PY
}

# Idle OpenMP threads sleep rather than spin: three ranks share this machine's cores.
export OMP_WAIT_POLICY=PASSIVE

echo "=== 1. rank 2 sleeps 300 ms in each step"
STOKER_TEST_SLOW_RANK=2:300 run_traced slow_rank
check_verdicts slow_rank straggler 2 compute
check_trace slow_rank

echo "=== 2. node 1's data service waits 100 ms before each sample"
STOKER_TEST_SLOW_DECODE=1:100 run_traced slow_node
check_verdicts slow_node input 1 input
check_trace slow_node

# `launcher trace merge DIR` on its own writes the same job file again.
rm "$out/slow_node/job_trace.json"
"$root/launcher/launcher" trace merge "$out/slow_node" 2>&1 | tee "$out/merge.log"
grep -q "merged 3 rank(s) and 3 data service(s)" "$out/merge.log" ||
  { echo "FAIL: launcher trace merge did not merge every file"; exit 1; }
"$python" "$root/tests/check_trace.py" "$out/slow_node/job_trace.json" --ranks=3 --data_services=3
if [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]]; then
  cp "$out/slow_rank.png" "$out/slow_node.png" "$out/slow_node/job_trace.json" \
    "$TEST_UNDECLARED_OUTPUTS_DIR/"
fi
echo "PASS"
