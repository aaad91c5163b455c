#!/usr/bin/env python3
"""torchvision's input pipeline alone, in steady state: the same-run figure that the data
service's images/s is compared with (bench_gpu.py --phase data_service).

Like for like with data_service_benchmark: the clock starts after --warmup batches have
been taken (so the workers have started and their prefetch is full), runs over the
remaining batches of --passes shuffled passes, and the loader produces what the data
service produces: uint8 images (PILToTensor), not float32, with Resize(256) +
CenterCrop(224) (--split val) or RandomResizedCrop(224) + RandomHorizontalFlip (--split
train). No pin_memory: the data service's benchmark copies nothing to a GPU either.
Prints one JSON line.

  python3 loader_bench.py --root /tmp/stoker_bench_12000/train --workers 16
"""
import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Sampler
from torchvision import datasets, transforms


class Passes(Sampler):
    """`passes` shuffled permutations of the dataset, one after another."""

    def __init__(self, size, passes, seed):
        self.size, self.passes, self.seed = size, passes, seed

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.passes):
            yield from torch.randperm(self.size, generator=g).tolist()

    def __len__(self):
        return self.size * self.passes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=16, help="batches taken before the clock starts")
    ap.add_argument("--split", choices=["val", "train"], default="val")
    a = ap.parse_args()
    if a.split == "val":
        geometry = [transforms.Resize(256), transforms.CenterCrop(224)]
    else:
        geometry = [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip()]
    tf = transforms.Compose(geometry + [transforms.PILToTensor()])  # uint8 CHW, like the ring's bytes
    ds = datasets.ImageFolder(a.root, transform=tf)
    dl = DataLoader(ds, batch_size=a.batch, sampler=Passes(len(ds), a.passes, 0), num_workers=a.workers,
                    drop_last=True)
    batches = iter(dl)
    for _ in range(a.warmup):
        x, _ = next(batches)
        assert x.dtype == torch.uint8
    start = time.time()
    images = 0
    for x, _ in batches:
        images += x.shape[0]
    seconds = time.time() - start
    print(json.dumps({"what": "torchvision_loader", "split": a.split, "output": "uint8",
                      "workers": a.workers, "warmup_batches": a.warmup, "images": images,
                      "seconds": round(seconds, 2), "img_s": round(images / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
