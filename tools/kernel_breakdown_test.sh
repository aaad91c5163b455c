#!/usr/bin/env bash
# tools/kernel_breakdown.py on a hand-made trace with host operator records: each kernel's
# time goes to the operator that launched it (its "External id") and to the outermost program
# call or autograd function around that operator, block numbers folded; a kernel of a graph
# replay (no link) counts under "-".
set -euo pipefail
python="${STOKER_PYTHON:-python3}"
script="$(dirname "$0")/kernel_breakdown.py"
[[ -f $script ]] || script="$TEST_SRCDIR/$TEST_WORKSPACE/tools/kernel_breakdown.py"
trace="$TEST_TMPDIR/trace.json"
cat >"$trace" <<'JSON'
{"traceEvents": [
 {"ph": "X", "cat": "user_annotation", "name": "--model=/tmp/m.pt2 (training program): node linalg_vector_norm_3 (aten.linalg_vector_norm.default)", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
 {"ph": "X", "cat": "cpu_op", "name": "aten::linalg_vector_norm", "pid": 1, "tid": 1, "ts": 1, "dur": 8, "args": {"External id": 5}},
 {"ph": "X", "cat": "user_annotation", "name": "--model=/tmp/m.pt2 (training program): node linalg_vector_norm_7 (aten.linalg_vector_norm.default)", "pid": 1, "tid": 1, "ts": 20, "dur": 10},
 {"ph": "X", "cat": "cpu_op", "name": "aten::linalg_vector_norm", "pid": 1, "tid": 1, "ts": 21, "dur": 8, "args": {"External id": 6}},
 {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: DivBackward0", "pid": 1, "tid": 2, "ts": 40, "dur": 20, "args": {"External id": 7}},
 {"ph": "X", "cat": "cpu_op", "name": "DivBackward0", "pid": 1, "tid": 2, "ts": 41, "dur": 18, "args": {"External id": 8}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 2, "ts": 42, "dur": 5, "args": {"External id": 9}},
 {"ph": "X", "cat": "kernel", "name": "reduce_kernel_a", "pid": 0, "tid": 7, "ts": 100, "dur": 300, "args": {"External id": 5}},
 {"ph": "X", "cat": "kernel", "name": "reduce_kernel_b", "pid": 0, "tid": 7, "ts": 400, "dur": 100, "args": {"External id": 6}},
 {"ph": "X", "cat": "kernel", "name": "elementwise_mul", "pid": 0, "tid": 7, "ts": 500, "dur": 200, "args": {"External id": 9}},
 {"ph": "X", "cat": "kernel", "name": "replayed_kernel", "pid": 0, "tid": 7, "ts": 700, "dur": 50, "args": {}}
]}
JSON
out="$("$python" "$script" "$trace" --steps 1)"
echo "$out"
expect() {
  grep -qF -- "$1" <<<"$out" || { echo "FAIL: no line with: $1"; exit 1; }
}
expect "   0.400          2.0  linalg_vector_norm (aten.linalg_vector_norm.default) -> aten::linalg_vector_norm"
expect "   0.200          1.0  backward: DivBackward0 -> aten::mul"
expect "   0.050          1.0  - -> -"
echo "PASS"
