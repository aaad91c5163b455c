#!/usr/bin/env python3
"""Plots a trainer's --metrics_jsonl: training loss and learning rate by optimizer step,
validation top-1/top-5 accuracy by epoch.

    tools/plot_metrics.py METRICS.jsonl OUT.png [--title TEXT]

Needs matplotlib (tools/setup.sh installs it). A resumed run appends to the same file;
records are ordered by step, and a step that was trained twice (after a fall-back to an
older checkpoint) keeps its last record."""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("metrics")
    parser.add_argument("out")
    parser.add_argument("--title", default="")
    args = parser.parse_args()

    train, val = {}, {}
    with open(args.metrics) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{args.metrics} line {number}: not JSON ({e})")
            if record.get("type") == "train":
                train[record["global_step"]] = record
            elif record.get("type") == "val":
                val[record["epoch"]] = record
    if not train and not val:
        sys.exit(f"{args.metrics}: no train or val records")

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    steps = sorted(train)
    if steps:
        left.plot(steps, [train[s]["loss"] for s in steps], color="tab:blue", label="training loss")
        left.set_xlabel("optimizer step")
        left.set_ylabel("loss (mean over ranks)")
        left.set_yscale("log")
        lr_axis = left.twinx()
        lr_axis.plot(steps, [train[s]["lr"] for s in steps], color="tab:gray", linestyle="--", label="learning rate")
        lr_axis.set_ylabel("learning rate")
        lines = left.get_lines() + lr_axis.get_lines()
        left.legend(lines, [l.get_label() for l in lines], loc="upper right")
        left.set_title("training")
    epochs = sorted(val)
    if epochs:
        right.plot(epochs, [100 * val[e]["top1"] for e in epochs], marker="o", label="top-1")
        right.plot(epochs, [100 * val[e]["top5"] for e in epochs], marker="s", label="top-5")
        right.set_xlabel("epoch")
        right.set_ylabel("validation accuracy (%)")
        right.set_ylim(0, 100)
        right.grid(alpha=0.3)
        last = val[epochs[-1]]
        right.set_title(f"validation ({last['samples']} samples): final top-1 {100 * last['top1']:.1f}%")
        right.legend(loc="lower right")
    if args.title:
        figure.suptitle(args.title)
    figure.tight_layout()
    figure.savefig(args.out, dpi=100)
    print(f"wrote {args.out}: {len(steps)} training records, {len(epochs)} validations")


if __name__ == "__main__":
    main()
