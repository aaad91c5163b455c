"""Checks that the runs of one training epoch, each on its own world size and batch size,
trained the epoch's global order exactly once between them (Note [The rest of an epoch] in
data_service/dataset/sampler.h).

Each run is given as PREFIX:WORLD:BATCH:START[:END]: its --sample_log files (PREFIX.rank<r>,
`epoch step index...` per batch), its --loss_log (PREFIX.loss, rank 0's `epoch step loss`
per trained micro-batch: a delivered batch missing there was skipped), the world size and
per-rank batch size it ran with, the position in the epoch's global order it started at,
and optionally the position from which on its batches do not count (a run killed after its
last checkpoint: what it trained later is lost and trained again by the next run). Rank r's
k-th sample of a run that started at START sits at position START + r + k * WORLD.

The positions the runs trained must be 0..L-1, each once, holding the permutation torch's
DistributedSampler makes from (seed + epoch) at position i % N; without --drop_last_batch L
covers the dataset (L >= N, the rest padded by fewer than the last run's world size), with
it L <= N and the untrained tail is shorter than the last run's global batch.

Usage: check_epoch_order.py --samples=N --seed=S --epoch=E [--drop_last_batch] RUN...
"""
import argparse
import sys


def trained_steps(loss_log, epoch):
    steps = set()
    with open(loss_log) as f:
        for line in f:
            words = line.split()
            if int(words[0]) == epoch:
                steps.add(int(words[1]))
    return steps


def run_positions(spec, epoch):
    parts = spec.split(":")
    prefix, world, batch, start = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
    end = int(parts[4]) if len(parts) > 4 else None
    trained = trained_steps(prefix + ".loss", epoch)
    first = start // (world * batch)  # the index the run's first batch of the epoch has
    placed = {}
    for rank in range(world):
        with open(f"{prefix}.rank{rank}") as f:
            for line in f:
                words = [int(w) for w in line.split()]
                if words[0] != epoch or words[1] not in trained:
                    continue
                step, indices = words[1], words[2:]
                for j, index in enumerate(indices):
                    position = start + rank + ((step - first) * batch + j) * world
                    if end is not None and position >= end:
                        continue
                    if position in placed:
                        sys.exit(f"FAIL: {prefix}: position {position} trained twice")
                    placed[position] = index
    return placed, world, batch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--drop_last_batch", action="store_true")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()

    import torch
    g = torch.Generator()
    g.manual_seed(args.seed + args.epoch)
    order = torch.randperm(args.samples, generator=g).tolist()

    placed = {}
    for spec in args.runs:
        mine, world, batch = run_positions(spec, args.epoch)
        twice = set(mine) & set(placed)
        if twice:
            sys.exit(f"FAIL: positions {sorted(twice)[:8]} were trained by two runs")
        placed.update(mine)
    n = args.samples
    length = len(placed)
    if sorted(placed) != list(range(length)):
        missing = sorted(set(range(max(placed) + 1)) - set(placed))
        sys.exit(f"FAIL: the runs left positions {missing[:8]} of the epoch's order untrained")
    wrong = [i for i in range(length) if placed[i] != order[i % n]]
    if wrong:
        i = wrong[0]
        sys.exit(f"FAIL: position {i} holds sample {placed[i]}, the global order has {order[i % n]}")
    if args.drop_last_batch:
        if not (length <= n and n - length < world * batch):
            sys.exit(f"FAIL: {length} of {n} samples trained with --drop_last_batch "
                     f"(the last run's global batch is {world * batch})")
    elif not (length >= n and length - n < world):
        sys.exit(f"FAIL: {length} positions trained for {n} samples on {world} ranks")
    trained = sorted(placed.values())
    repeated = length - len(set(trained))
    print(f"epoch {args.epoch} OK: {len(args.runs)} run(s) trained positions 0..{length - 1} of "
          f"the global order of {n} samples once each, in order ({len(set(trained))} distinct "
          f"samples, {repeated} repeated as DistributedSampler pads)")


if __name__ == "__main__":
    main()
