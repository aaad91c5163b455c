#!/usr/bin/env python3
"""Where a training step's GPU time goes, by kernel class, from a Chrome trace of CUPTI's
kernel records or an Nsight Compute CSV.

    bundle/stoker trainer ... --profile_steps=N --kernel_trace=stoker.json
    python3 tools/peer_kernel_trace.py ARCH --batch B --steps N --out peer.json
    python3 tools/kernel_breakdown.py stoker.json --steps N

    ncu --profile-from-start off --clock-control none --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        bundle/stoker trainer ... --profile_steps=N > kernels.csv
    python3 tools/kernel_breakdown.py kernels.csv --steps N [--copy_gbps 4300]

A trace (`.json`, `.json.gz`) holds every kernel's interval on the GPU timeline as it ran:
each class gets its time per step, and the window's span minus the time some kernel ran is
the GPU's idle time (launch gaps, host waits). An ncu CSV holds the profiled range's kernels
replayed one by one with their DRAM bytes: each class also gets its bytes per step, the rate
it moved them at, and the time those bytes would take at the measured device copy rate (the
floor for memory-bound work); ncu's sum is busy time, not wall time.

A trace recorded with the host's operators (Stoker's --kernel_trace_ops, or PyTorch's
profiler with CPU activity) also gets each kernel's time by the operator that launched it
(linked by its "External id") and what that operator ran inside: the exported program's call
(a user scope named by its node, block numbers folded: `linear_12` counts as `linear`) or
the autograd function of backward. Kernels of CUDA-graph replays have no such link.
"""
import argparse, collections, csv, gzip, json, re, sys

# First match wins: batch norm before convolution (cuDNN names both). Stoker's fused
# batch-norm kernels (trainer/nn/fused_kernels.cu) count as batch norm.
CLASSES = [
    ("attention", r"flash|fmha|attention|sdpa"),
    ("batch_norm", r"batch_?norm|bn_fw|bn_bw|welford|_bn_|batchnorm|"
                   r"statisticskernel|statisticsfinalize|fixedstatistics|applykernel|backwardreduce|"
                   r"backwardfinalize|backwardapply"),
    ("layer_norm", r"layer_?norm|rms_?norm|group_?norm"),
    ("convolution_gemm", r"conv|xmma|gemm|cutlass|implicit|dgrad|wgrad|fprop|sm90_|cudnn|nhwckrsc|"
                         r"nvjet|triton_tem"),
    # Inductor's generated kernels: pointwise chains, and reductions with what it fused in.
    ("triton_pointwise", r"triton_poi"),
    ("triton_reduction", r"triton_red|triton_per"),
    ("loss", r"nll_loss|softmax|cross_entropy"),
    ("optimizer", r"adam|fused_sgd|multi_tensor|foreach"),
    ("pooling", r"pool"),
    ("input_normalise_copies", r"normaliz|memcpy|copy_|nchwtonhwc|nhwctonchw|transpose"),
    ("reduction", r"reduce"),
    ("pointwise", r"elementwise|vectorized|unrolled|threshold|relu|add|mul|fill|where"),
]


def classify(name):
    low = name.lower()
    for label, pattern in CLASSES:
        if re.search(pattern, low):
            return label
    return "other"


def read_kernels(path):
    """{id: {"name": ..., metric: value}} from ncu's --csv output (one row per metric)."""
    kernels = collections.OrderedDict()
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for row in csv.DictReader(lines):
        k = kernels.setdefault(row["ID"], {"name": row["Kernel Name"]})
        value = float(row["Metric Value"].replace(",", "")) if row["Metric Value"] else 0.0
        unit = row.get("Metric Unit", "")
        scale = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3,
                 "msecond": 1e-3, "s": 1.0, "second": 1.0,
                 "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}.get(unit, 1.0)
        k[row["Metric Name"]] = value * scale
    return kernels


def read_trace(path):
    """({id: {"name", "gpu__time_duration.sum"}}, busy seconds, span seconds) from a Chrome
    trace's kernel, copy and set records (microseconds)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kernels = collections.OrderedDict()
    intervals = []
    for i, e in enumerate(sorted(gpu, key=lambda e: e["ts"])):
        start, dur = float(e["ts"]), float(e.get("dur", 0.0))
        kernels[i] = {"name": e.get("name", "?"), "gpu__time_duration.sum": dur * 1e-6,
                      "external_id": (e.get("args") or {}).get("External id")}
        intervals.append((start, start + dur))
    busy, end = 0.0, None
    for start, stop in intervals:  # sorted by start: the union of the intervals
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    span = (max(s for _, s in intervals) - intervals[0][0]) if intervals else 0.0
    return kernels, busy * 1e-6, span * 1e-6, host_operators(events)


def context_label(name):
    """A program call's or autograd function's record name, short and with block numbers
    folded: "--model=m.pt2 (training program): node linear_12 (aten.linear.default)" ->
    "linear (aten.linear.default)"."""
    name = re.sub(r"--model=\S+ \((?:training|evaluation) program\): node ", "", name)
    name = re.sub(r"\b([A-Za-z]\w*?)_\d+ \(", r"\1 (", name)
    return re.sub(r"^autograd::engine::evaluate_function: ", "backward: ", name)


def host_operators(events):
    """{External id: (operator, context)} of the trace's host operator records: the operator's
    name, and the outermost program call (user scope) or autograd function around it on its
    thread ("-" for none)."""
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    found = {}
    for records in by_thread.values():
        records.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0))))
        open_records = []  # (end, record), outermost first
        for e in records:
            start = float(e["ts"])
            while open_records and open_records[-1][0] <= start:
                open_records.pop()
            context = next((r for _, r in open_records if r.get("cat") == "user_annotation" or
                            r.get("name", "").startswith("autograd::engine::evaluate_function")), None)
            ext = (e.get("args") or {}).get("External id")
            if e.get("cat") == "cpu_op" and ext is not None:
                found[ext] = (e.get("name", "?"), context_label(context["name"]) if context else "-")
            open_records.append((start + float(e.get("dur", 0.0)), e))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", help="a Chrome trace (.json, .json.gz) or an ncu CSV")
    ap.add_argument("--steps", type=int, required=True, help="profiled steps in the CSV")
    ap.add_argument("--copy_gbps", type=float, default=4300.0, help="measured device copy rate")
    ap.add_argument("--json", help="also write the table here")
    a = ap.parse_args()
    trace = a.csv.endswith((".json", ".json.gz")) or ".rank" in a.csv
    busy = span = None
    operators = {}
    if trace:
        kernels, busy, span, operators = read_trace(a.csv)
    else:
        kernels = read_kernels(a.csv)
    if not kernels:
        sys.exit(f"{a.csv}: no kernels (was the range empty?)")
    per = collections.defaultdict(lambda: {"kernels": 0, "seconds": 0.0, "bytes": 0.0})
    names = collections.defaultdict(float)
    for k in kernels.values():
        c = per[classify(k["name"])]
        c["kernels"] += 1
        c["seconds"] += k.get("gpu__time_duration.sum", 0.0)
        c["bytes"] += k.get("dram__bytes_read.sum", 0.0) + k.get("dram__bytes_write.sum", 0.0)
        names[k["name"][:90]] += k.get("gpu__time_duration.sum", 0.0)
    total = sum(c["seconds"] for c in per.values())
    rows = []
    print(f"{len(kernels)} kernels over {a.steps} steps; kernel time {1e3 * total / a.steps:.2f} ms per step")
    if trace:
        print(f"GPU timeline: span {1e3 * span / a.steps:.2f} ms per step, busy {1e3 * busy / a.steps:.2f}, "
              f"idle {1e3 * (span - busy) / a.steps:.2f} ({(span - busy) / span:.1%} of the span)")
    print(f"{'class':<24}{'kernels/step':>13}{'ms/step':>10}{'share':>8}" +
          ("" if trace else f"{'GB/step':>9}{'GB/s':>8}{'ms at copy rate':>17}"))
    for label, c in sorted(per.items(), key=lambda kv: -kv[1]["seconds"]):
        ms = 1e3 * c["seconds"] / a.steps
        gb = c["bytes"] / a.steps / 1e9
        rate = c["bytes"] / c["seconds"] / 1e9 if c["seconds"] else 0.0
        floor = 1e3 * gb / a.copy_gbps
        rows.append(dict(kernel_class=label, kernels_per_step=c["kernels"] / a.steps, ms_per_step=ms,
                         share=c["seconds"] / total, gb_per_step=gb, gbps=rate, ms_at_copy_rate=floor))
        print(f"{label:<24}{c['kernels'] / a.steps:>13.1f}{ms:>10.2f}{c['seconds'] / total:>8.1%}" +
              ("" if trace else f"{gb:>9.2f}{rate:>8.0f}{floor:>17.2f}"))
    print("\nlongest kernels (ms per step):")
    for name, s in sorted(names.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {1e3 * s / a.steps:8.3f}  {name}")
    if operators:
        by_call = collections.defaultdict(lambda: [0, 0.0])
        for k in kernels.values():
            op, context = operators.get(k.get("external_id"), ("-", "-"))
            row = by_call[(context, op)]
            row[0] += 1
            row[1] += k.get("gpu__time_duration.sum", 0.0)
        print("\nkernel time by program call (or backward function) and operator (ms per step):")
        print(f"{'ms/step':>8}{'kernels/step':>13}  call -> operator")
        for (context, op), (count, seconds) in sorted(by_call.items(), key=lambda kv: -kv[1][1])[:40]:
            print(f"{1e3 * seconds / a.steps:8.3f}{count / a.steps:13.1f}  {context[:100]} -> {op}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": a.steps, "kernels": len(kernels), "kernel_ms_per_step": 1e3 * total / a.steps,
                       "span_ms_per_step": None if span is None else 1e3 * span / a.steps,
                       "busy_ms_per_step": None if busy is None else 1e3 * busy / a.steps,
                       "classes": rows}, f, indent=1)


if __name__ == "__main__":
    main()
