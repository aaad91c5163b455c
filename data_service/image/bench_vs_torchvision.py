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
Stoker's produce the same uint8 HWC 224x224x3 samples. Everything runs on one thread.
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
    def one(blob):
        with Image.open(io.BytesIO(blob)) as im:
            return transform(im.convert("RGB"))

    for blob in blobs:  # warm up
        one(blob)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for blob in blobs:
            one(blob)
        done += len(blobs)
    return done / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", required=True, help="transforms_benchmark binary")
    parser.add_argument("--dir", help="directory of JPEGs (default: generate)")
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()

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
        tv = {"eval": torchvision_rate(blobs, eval_tf, args.seconds),
              "train": torchvision_rate(blobs, train_tf, args.seconds)}

        out = subprocess.run([args.benchmark, f"--dir={directory}", f"--seconds={args.seconds}"],
                             check=True, capture_output=True, text=True).stdout
        stoker = {m.group(1): float(m.group(2))
                  for m in re.finditer(r"^(\w+) images_per_s=([\d.]+)", out, re.M)}

    print(f"{len(blobs)} JPEGs, {args.width}x{args.height}, quality {args.quality}; "
          f"one thread; images/s per core")
    print(f"{'pipeline':8s} {'torchvision+PIL':>16s} {'stoker':>10s} {'ratio':>7s}")
    for name in ("eval", "train"):
        print(f"{name:8s} {tv[name]:16.1f} {stoker[name]:10.1f} {stoker[name] / tv[name]:7.2f}")
    print(f"(stoker full-size decode only: {stoker['decode_full']:.1f} images/s)")


if __name__ == "__main__":
    main()
