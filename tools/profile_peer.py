#!/usr/bin/env python3
"""The Python recipe's training step over a few steady-state steps, for a kernel-by-kernel
comparison with Stoker's --profile_steps (tools/kernel_breakdown.py classifies both):

    python3 tools/profile_peer.py --arch vit_b_16 --batch 128 --mode compile --trace peer.json
    ncu --profile-from-start off ... python3 tools/profile_peer.py --arch resnet50 --mode compile

The step is the anchor's (../shared/bench/anchor_models.py): torchvision ARCH, synthetic
batches on the GPU, bf16 autocast, channels_last, fused AdamW, 224x224, 1000 classes; eager,
torch.compile's default mode or "reduce-overhead" (CUDA graphs). With --trace, PyTorch's
profiler records the profiled steps' kernels through CUPTI into a Chrome trace, as Stoker's
--kernel_trace does; without it, the steps are marked as the CUDA profiler's range for an
external profiler. Prints one JSON line with the images/s of the profiled steps and of
--time_steps unprofiled ones just before.
"""
import argparse
import json
import time

import torch
from torchvision import models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mode", choices=("eager", "compile", "reduce-overhead"), default="eager")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=2, help="profiled steps")
    ap.add_argument("--time_steps", type=int, default=20, help="unprofiled steps timed before them")
    ap.add_argument("--trace", help="write the profiled steps' kernels here (Chrome trace)")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = getattr(models, a.arch)(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4, fused=True)
    crit = torch.nn.CrossEntropyLoss()
    run = {"eager": lambda m: m, "compile": torch.compile,
           "reduce-overhead": lambda m: torch.compile(m, mode="reduce-overhead")}[a.mode](model)
    x = torch.randn(a.batch, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = crit(run(x), y)
        loss.backward()
        opt.step()

    def timed(steps):
        torch.cuda.synchronize()
        t = time.time()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        return round(steps * a.batch / (time.time() - t), 1)

    timed(a.warmup)
    unprofiled = timed(a.time_steps)
    if a.trace:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            profiled = timed(a.steps)
        prof.export_chrome_trace(a.trace)
    else:
        torch.cuda.cudart().cudaProfilerStart()
        profiled = timed(a.steps)
        torch.cuda.cudart().cudaProfilerStop()
    print(json.dumps(dict(what="profile_peer", arch=a.arch, batch=a.batch, mode=a.mode, steps=a.steps,
                          img_s_profiled=profiled, img_s_unprofiled=unprofiled, trace=a.trace)), flush=True)


if __name__ == "__main__":
    main()
