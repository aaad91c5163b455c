#!/usr/bin/env python3
"""Draws a PNG timeline of a few traced steps across ranks from a merged Stoker trace.

  tools/trace_timeline.py DIR/job_trace.json timeline.png [--steps=3] [--first=STEP]

One row per rank (its training thread: data wait, copy, forward, backward, bucket
reductions, optimizer, CUDA-graph replays, collectives; its GPU intervals below it when
the trace has them) and one per data service (how many of its decode threads are busy),
all on the merged clock (launcher trace merge). The title carries the verdicts of the
steps shown (rank 0's, the "verdict" instants). Needs matplotlib.
"""
import argparse
import collections
import json
import re
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {
    "input": "#d62728",          # waiting for the data service
    "copy": "#ff7f0e",
    "compute": "#1f77b4",
    "communication": "#9467bd",
    "validation": "#8c564b",
    "checkpoint": "#7f7f7f",
    "gpu": "#17becf",
    "decode": "#2ca02c",
}
RANK_PID_LIMIT = 1000000  # data services are 1000000 + their node


def load(path):
    with open(path) as f:
        trace = json.load(f)
    names = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
    return trace["traceEvents"], names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("png")
    parser.add_argument("--steps", type=int, default=3, help="how many steps to draw")
    parser.add_argument("--first", type=int, default=-1,
                        help="the first step drawn (default: the middle of the window)")
    args = parser.parse_args()
    events, names = load(args.trace)

    steps = {}  # step -> (start, end) over all ranks
    for e in events:
        if e["ph"] == "X" and e.get("cat") == "step":
            step = e["args"]["step"]
            start, end = steps.get(step, (e["ts"], e["ts"] + e["dur"]))
            steps[step] = (min(start, e["ts"]), max(end, e["ts"] + e["dur"]))
    if not steps:
        sys.exit("no traced steps in %s" % args.trace)
    ordered = sorted(steps)
    first = args.first if args.first >= 0 else ordered[max(0, len(ordered) // 2 - args.steps // 2)]
    shown = [s for s in ordered if first <= s < first + args.steps] or ordered[:args.steps]
    t0 = steps[shown[0]][0]
    t1 = max(steps[s][1] for s in shown)
    margin = 0.02 * (t1 - t0)
    lo, hi = t0 - margin, t1 + margin

    ranks = sorted(p for p in names if p < RANK_PID_LIMIT)
    services = sorted(p for p in names if p >= RANK_PID_LIMIT)
    # One row per GPU stream of a rank (the training stream, the communicator's).
    gpu_tids = collections.defaultdict(set)
    for e in events:
        if e["pid"] in names and e["pid"] < RANK_PID_LIMIT and e.get("cat") == "gpu" and e["ph"] == "X":
            gpu_tids[e["pid"]].add(e["tid"])
    thread_names = {(e["pid"], e["tid"]): e["args"].get("name", "") for e in events
                    if e["ph"] == "M" and e["name"] == "thread_name"}
    rows = []  # (label, pid, kind)
    for p in ranks:
        rows.append((names[p], p, "rank"))
        for tid in sorted(gpu_tids[p]):
            rows.append(("  " + (thread_names.get((p, tid)) or "GPU"), p, ("gpu", tid)))
    for p in services:
        rows.append((names[p] + ": decode threads busy", p, "service"))
    index = {(pid, kind): i for i, (_, pid, kind) in enumerate(rows)}

    fig, ax = plt.subplots(figsize=(14, 0.75 * len(rows) + 2.2))
    ms = lambda t: (t - t0) / 1e3  # noqa: E731
    # Longest first, so that what nests inside a slice (a bucket's reduction inside
    # backward) is drawn over it.
    for e in sorted((e for e in events if e["ph"] == "X"), key=lambda e: -e["dur"]):
        if e["ts"] + e["dur"] < lo or e["ts"] > hi:
            continue
        cat = e.get("cat", "")
        pid = e["pid"]
        if pid < RANK_PID_LIMIT:
            if cat == "step" or e["tid"] == 9:  # the step's outline; clock pings
                continue
            kind = ("gpu", e["tid"]) if cat == "gpu" else "rank"
            y = index.get((pid, kind))
            if y is None or cat not in COLOURS:
                continue
            if cat == "gpu" and e["name"].startswith("bucket "):
                cat = "communication"  # a bucket's all-reduce on the communicator's stream
            depth = 0.8 if cat != "communication" or e["name"].startswith("stop") else 0.45
            ax.broken_barh([(ms(e["ts"]), e["dur"] / 1e3)], (y - depth / 2, depth),
                           facecolors=COLOURS[cat], edgecolor="black", linewidth=0.2)
    for p in ranks:
        for s in shown:
            for e in events:
                if e["pid"] == p and e.get("cat") == "step" and e["args"]["step"] == s:
                    y = index[(p, "rank")]
                    ax.plot([ms(e["ts"]), ms(e["ts"] + e["dur"])], [y + 0.47, y + 0.47],
                            color="black", linewidth=1)
                    ax.text(ms(e["ts"]), y + 0.5, "step %d" % s, fontsize=7, va="bottom")
    # A data service: the number of its decode threads busy over time.
    for p in services:
        y = index[(p, "service")]
        edges = []
        threads = set()
        for e in events:
            if e["pid"] == p and e.get("cat") == "decode" and e["ph"] == "X":
                threads.add(e["tid"])
                edges.append((e["ts"], 1))
                edges.append((e["ts"] + e["dur"], -1))
        edges.sort()
        busy, xs, ys = 0, [ms(lo)], [0]
        for t, d in edges:
            xs.append(ms(t)), ys.append(busy)
            busy += d
            xs.append(ms(t)), ys.append(busy)
        xs.append(ms(hi)), ys.append(busy)
        scale = 0.8 / max(1, len(threads))
        ax.fill_between(xs, [y - 0.4 + v * scale for v in ys], y - 0.4, step=None,
                        color=COLOURS["decode"], alpha=0.8)
        ax.text(ms(hi), y, " %d threads" % len(threads), fontsize=7, va="center")
    # Flows: each batch from its data service to the rank that took it.
    starts = {}
    for e in events:
        if e["ph"] == "s" and e["name"] == "batch":
            starts[e["id"]] = e
    for e in events:
        if e["ph"] == "f" and e["name"] == "batch" and e["id"] in starts and lo <= e["ts"] <= hi:
            s = starts[e["id"]]
            if s["ts"] < lo:
                continue
            ys = index.get((s["pid"], "service"))
            yr = index.get((e["pid"], "rank"))
            if ys is not None and yr is not None:
                ax.annotate("", xy=(ms(e["ts"]), yr), xytext=(ms(s["ts"]), ys),
                            arrowprops=dict(arrowstyle="->", color="grey", linewidth=0.6))

    verdicts = []
    for e in events:
        if e["ph"] in ("i", "I") and e.get("cat") == "verdict":
            m = re.match(r"step (\d+):", e["args"].get("text", ""))
            if m and int(m.group(1)) in shown:
                verdicts.append(e["args"]["text"])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(ms(lo), ms(hi))
    ax.set_xlabel("ms on rank 0's clock (merged trace)")
    title = "Stoker trace: steps %d-%d" % (shown[0], shown[-1])
    if verdicts:
        # Wrapped to the plot's width (left-aligned over it, at this font size).
        title += "\n" + "\n".join(textwrap.fill(v, 150) for v in verdicts[:3])
    ax.set_title(title, fontsize=8, loc="left")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], fontsize=7,
              loc="upper right", ncol=4, bbox_to_anchor=(1.0, -0.12 if len(rows) < 4 else -0.06))
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print("timeline of steps %s across %d rank(s) and %d data service(s): %s" %
          (shown, len(ranks), len(services), args.png))


if __name__ == "__main__":
    main()
