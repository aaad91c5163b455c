#!/usr/bin/env python3
"""The Python recipe's training step (torchvision ResNet, bf16 autocast, channels_last,
AdamW; eager or torch.compile), with a few steps marked as the CUDA profiler's range, for
a kernel-by-kernel comparison with Stoker's --profile_steps under the same profiler:

    ncu --profile-from-start off ... python3 tools/profile_peer.py --arch resnet50 --compile
    python3 tools/kernel_breakdown.py kernels.csv --steps 2
"""
import argparse

import torch
from torchvision import models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=2, help="steps inside the profiled range")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = getattr(models, a.arch)(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    crit = torch.nn.CrossEntropyLoss()
    run = torch.compile(model) if a.compile else model
    x = torch.randn(a.batch, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = crit(run(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
