"""Checks the trainers' --sample_log files (PATH.rank<r>: `epoch step index...` per trained
batch) for the sampling and seeding invariants:

- every epoch covers the dataset exactly once across the ranks (no sample lost or repeated;
  the test picks a dataset size that needs no padding and no dropped batch);
- the ranks agree on one global order per epoch: rank r's i-th sample sits at position
  r + i * world of that order, which is the permutation torch's DistributedSampler makes
  from (seed + epoch) when --seed is given;
- the order differs from one epoch to the next.

Usage: check_sample_log.py PREFIX --world=W --epochs=E --samples=N [--seed=S]
"""
import argparse
import sys


def read_rank(path):
    epochs = {}
    with open(path) as f:
        for line in f:
            words = [int(w) for w in line.split()]
            epoch, step, indices = words[0], words[1], words[2:]
            epochs.setdefault(epoch, []).append((step, indices))
    return {e: [i for _, batch in sorted(steps) for i in batch] for e, steps in epochs.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix")
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--seed", type=int)
    args = parser.parse_args()

    ranks = [read_rank(f"{args.prefix}.rank{r}") for r in range(args.world)]
    orders = []
    for epoch in range(args.epochs):
        per_rank = [rank.get(epoch, []) for rank in ranks]
        lengths = {len(seq) for seq in per_rank}
        if lengths != {args.samples // args.world}:
            sys.exit(f"FAIL: epoch {epoch}: ranks trained {[len(s) for s in per_rank]} samples, "
                     f"expected {args.samples // args.world} each")
        everything = sorted(i for seq in per_rank for i in seq)
        if everything != list(range(args.samples)):
            sys.exit(f"FAIL: epoch {epoch} does not cover the {args.samples} samples exactly once")
        order = [None] * args.samples
        for r, seq in enumerate(per_rank):
            order[r::args.world] = seq
        orders.append(order)
        if args.seed is not None:
            import torch
            g = torch.Generator()
            g.manual_seed(args.seed + epoch)
            expected = torch.randperm(args.samples, generator=g).tolist()
            if order != expected:
                sys.exit(f"FAIL: epoch {epoch}: the ranks' order is not DistributedSampler's "
                         f"for seed {args.seed} (first positions {order[:8]} vs {expected[:8]})")
    for epoch in range(1, args.epochs):
        if orders[epoch] == orders[epoch - 1]:
            sys.exit(f"FAIL: epochs {epoch - 1} and {epoch} have the same order")
    seeded = f", DistributedSampler's order for seed {args.seed}" if args.seed is not None else ""
    print(f"sample log OK: {args.epochs} epochs x {args.world} ranks, each epoch covers "
          f"{args.samples} samples exactly once in one order shared by the ranks{seeded}, "
          f"and no two consecutive epochs share an order")


if __name__ == "__main__":
    main()
