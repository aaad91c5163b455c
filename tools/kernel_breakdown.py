#!/usr/bin/env python3
"""Where a training step's GPU time goes, by kernel class, from an Nsight Compute CSV.

    ncu --profile-from-start off --clock-control none --csv \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        bundle/stoker trainer ... --profile_steps=N > kernels.csv
    python3 tools/kernel_breakdown.py kernels.csv --steps N [--copy_gbps 4300]

The trainer marks its --profile_steps as the profiled range (cudaProfilerStart/Stop), so
the CSV holds those steps' kernels only. Each kernel class gets its time and DRAM bytes per
step, the rate it moved them at, and the time those bytes would take at the measured
device copy rate (the floor for memory-bound work). Kernels run serialised under ncu, so
the sum is GPU busy time, not the step's wall time (launch gaps are not in it).
"""
import argparse, collections, csv, json, re, sys

# First match wins: batch norm before convolution (cuDNN names both). Stoker's fused
# batch-norm kernels (trainer/nn/fused_kernels.cu) count as batch norm.
CLASSES = [
    ("batch_norm", r"batch_?norm|bn_fw|bn_bw|welford|_bn_|batchnorm|"
                   r"statisticskernel|statisticsfinalize|fixedstatistics|applykernel|backwardreduce|"
                   r"backwardfinalize|backwardapply"),
    ("convolution_gemm", r"conv|xmma|gemm|cutlass|implicit|dgrad|wgrad|fprop|sm90_|cudnn|nhwckrsc"),
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, required=True, help="profiled steps in the CSV")
    ap.add_argument("--copy_gbps", type=float, default=4300.0, help="measured device copy rate")
    ap.add_argument("--json", help="also write the table here")
    a = ap.parse_args()
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
    print(f"{len(kernels)} kernels over {a.steps} steps; GPU busy {1e3 * total / a.steps:.2f} ms per step")
    print(f"{'class':<24}{'kernels/step':>13}{'ms/step':>10}{'share':>8}{'GB/step':>9}{'GB/s':>8}{'ms at copy rate':>17}")
    for label, c in sorted(per.items(), key=lambda kv: -kv[1]["seconds"]):
        ms = 1e3 * c["seconds"] / a.steps
        gb = c["bytes"] / a.steps / 1e9
        rate = c["bytes"] / c["seconds"] / 1e9 if c["seconds"] else 0.0
        floor = 1e3 * gb / a.copy_gbps
        rows.append(dict(kernel_class=label, kernels_per_step=c["kernels"] / a.steps, ms_per_step=ms,
                         share=c["seconds"] / total, gb_per_step=gb, gbps=rate, ms_at_copy_rate=floor))
        print(f"{label:<24}{c['kernels'] / a.steps:>13.1f}{ms:>10.2f}{c['seconds'] / total:>8.1%}{gb:>9.2f}{rate:>8.0f}{floor:>17.2f}")
    print("\nlongest kernels (ms per step):")
    for name, s in sorted(names.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {1e3 * s / a.steps:8.3f}  {name}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": a.steps, "kernels": len(kernels), "busy_ms_per_step": 1e3 * total / a.steps,
                       "classes": rows}, f, indent=1)


if __name__ == "__main__":
    main()
