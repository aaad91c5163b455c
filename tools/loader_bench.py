#!/usr/bin/env python3
"""torchvision's input pipeline alone, timed over whole passes: the same-run figure that the
data service's images/s is compared with (bench_gpu.py --phase data_service).

The recipe's loader (../shared/bench/anchor_seed.py): ImageFolder + PIL, Resize(256) +
CenterCrop(224) + ToTensor + Normalize, DataLoader(batch 256, pin_memory, shuffle). The
anchor script times 12 batches right after the first two, which its workers had mostly
decoded ahead: that overstates the rate. Here the clock runs from the creation of the
iterator to the last batch of --passes passes over the folder (workers' start included,
spread over the passes), and prints one JSON line.

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
    a = ap.parse_args()
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                             transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(a.root, transform=tf)
    dl = DataLoader(ds, batch_size=a.batch, sampler=Passes(len(ds), a.passes, 0), num_workers=a.workers,
                    pin_memory=torch.cuda.is_available(), drop_last=True)
    start = time.time()
    images = 0
    for x, _ in dl:
        images += x.shape[0]
    seconds = time.time() - start
    print(json.dumps({"what": "torchvision_loader", "workers": a.workers, "images": images,
                      "seconds": round(seconds, 2), "img_s": round(images / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
