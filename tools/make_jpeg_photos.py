#!/usr/bin/env python3
"""Writes an ImageFolder of photo-sized baseline JPEGs (RGB, 4:2:0) whose decode costs what
a photograph's does: smooth shapes with fine texture, so that the data service's CPU
decode is the bottleneck a GPU decode share relieves:

    tools/make_jpeg_photos.py OUT [--images 12000] [--classes 100] [--size 500x375] [--quality 90]
    -> OUT/c<class>/<index>.jpg

The images are a pure function of the arguments. Needs numpy and Pillow; uses every core."""
import argparse
import os
from multiprocessing import Pool

import numpy as np
from PIL import Image


def make_one(job):
    path, seed, width, height, quality = job
    rng = np.random.default_rng(seed)
    # Low-frequency colour fields, upsampled, plus mild per-pixel texture.
    coarse = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
    y, x = np.mgrid[0:height, 0:width]
    stripes = (24 * np.sin(x / rng.uniform(5, 20) + y / rng.uniform(7, 30))).astype(np.int16)
    texture = rng.integers(-10, 11, (height, width, 3), dtype=np.int16)
    pixels = np.clip(base + stripes[..., None] + texture, 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, quality=quality, subsampling=2, progressive=False)
    return os.path.getsize(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--images", type=int, default=12000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--size", default="500x375", help="WIDTHxHEIGHT")
    parser.add_argument("--quality", type=int, default=90)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    jobs = []
    for i in range(args.images):
        folder = os.path.join(args.out, f"c{i % args.classes:03d}")
        os.makedirs(folder, exist_ok=True)
        jobs.append((os.path.join(folder, f"{i:06d}.jpg"), i, width, height, args.quality))
    with Pool(os.cpu_count()) as pool:
        sizes = pool.map(make_one, jobs, chunksize=32)
    print(f"wrote {len(sizes)} JPEGs of {width}x{height} (quality {args.quality}), "
          f"{sum(sizes) / len(sizes) / 1024:.1f} KiB on average, largest {max(sizes) / 1024:.1f} KiB, to {args.out}")


if __name__ == "__main__":
    main()
