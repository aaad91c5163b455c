"""Images per second on one core: Stoker's decode + transform (transforms_benchmark)
against torchvision + Pillow on the same JPEG files.

  bazel build -c opt //data_service/image:transforms_benchmark
  python3 data_service/image/bench_vs_torchvision.py \
      --benchmark bazel-bin/data_service/image/transforms_benchmark

Without --dir it writes --count natural-looking 500x375 JPEGs (quality 90) to a temporary
directory. torchvision's pipelines, from the file bytes already in memory:
  eval:  Image.open(...).convert("RGB") -> Resize(256) -> CenterCrop(224) -> PILToTensor
  train: Image.open(...).convert("RGB") -> RandomResizedCrop(224) -> RandomHorizontalFlip
         -> PILToTensor
Stoker's produce the same uint8 HWC 224x224x3 samples, for each --dct_scales choice
(decode.h, Note [Choice of DCT scales]). Everything runs on one thread, and rates are per
CPU-second of it (images/s per core), so time spent waiting for a core on a busy machine
does not count; each figure is the best of --rounds interleaved rounds.
"""

import argparse
import io
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import v2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata_tools"))
from make_image_cases import natural_image  # noqa: E402


def write_jpegs(directory, count, width, height, quality):
    for i in range(count):
        natural_image(width, height, seed=1000 + i).save(
            os.path.join(directory, f"img_{i:04d}.jpg"), quality=quality)


def torchvision_rate(blobs, transform, seconds):
    """Images per CPU-second of this (single-threaded) process."""
    def one(blob):
        with Image.open(io.BytesIO(blob)) as im:
            return transform(im.convert("RGB"))

    for blob in blobs:  # warm up
        one(blob)
    done = 0
    start = time.process_time()
    while time.process_time() - start < seconds:
        for blob in blobs:
            one(blob)
        done += len(blobs)
    return done / (time.process_time() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", required=True, help="transforms_benchmark binary")
    parser.add_argument("--dir", help="directory of JPEGs (default: generate)")
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dct_scales", default="pow2,all,none",
                        help="comma-separated transforms_benchmark --dct_scales values")
    parser.add_argument("--compare_huffman", action="store_true",
                        help="also run each --dct_scales value with libjpeg-turbo's Huffman "
                             "decoder (--fast_huffman=false) instead of Stoker's")
    args = parser.parse_args()
    # (label, transforms_benchmark flags) of each Stoker configuration.
    configs = []
    for scales in args.dct_scales.split(","):
        configs.append((scales, [f"--dct_scales={scales}"]))
        if args.compare_huffman:
            configs.append((scales + "+libjpeg_huffman",
                            [f"--dct_scales={scales}", "--fast_huffman=false"]))

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or tmp
        if not args.dir:
            write_jpegs(directory, args.count, args.width, args.height, args.quality)
        names = sorted(n for n in os.listdir(directory) if n.endswith((".jpg", ".jpeg")))
        blobs = [open(os.path.join(directory, n), "rb").read() for n in names]

        eval_tf = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224),
                              v2.PILToTensor()])
        train_tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True),
                               v2.RandomHorizontalFlip(), v2.PILToTensor()])
        # Interleaved rounds, best of each: other load on the machine (cache and memory
        # contention) only ever slows a measurement down.
        best = {}
        for _ in range(args.rounds):
            for name, tf in (("eval", eval_tf), ("train", train_tf)):
                rate = torchvision_rate(blobs, tf, args.seconds)
                best[("torchvision", name)] = max(best.get(("torchvision", name), 0), rate)
            for label, flags in configs:
                out = subprocess.run(
                    [args.benchmark, f"--dir={directory}", f"--seconds={args.seconds}",
                     "--rounds=1"] + flags,
                    check=True, capture_output=True, text=True).stdout
                for m in re.finditer(r"^(\w+)\s+best images_per_s=\s*([\d.]+)", out, re.M):
                    key = (f"stoker/{label}", m.group(1))
                    best[key] = max(best.get(key, 0), float(m.group(2)))

    print(f"{len(blobs)} JPEGs, {args.width}x{args.height}, quality {args.quality}; one thread; "
          f"images per CPU-second (per core), best of {args.rounds} rounds")
    print(f"{'pipeline':8s} {'torchvision+PIL':>16s}" +
          "".join(f" {'stoker/' + label:>13s} {'ratio':>6s}" for label, _ in configs))
    for name in ("eval", "train"):
        tv = best[("torchvision", name)]
        line = f"{name:8s} {tv:16.1f}"
        for label, _ in configs:
            rate = best[(f"stoker/{label}", name)]
            line += f" {rate:13.1f} {rate / tv:6.2f}"
        print(line)
    print("stoker full-size decode only: " + ", ".join(
        f"{best[(f'stoker/{label}', 'decode_full')]:.1f}" for label, _ in configs) +
        " images/s")


if __name__ == "__main__":
    main()
