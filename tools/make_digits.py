#!/usr/bin/env python3
"""Writes scikit-learn's handwritten digits (1797 8x8 images, 10 classes) as an ImageFolder
of PNGs (or baseline RGB JPEGs of quality 90, 4:2:0, which the trainer's GPU can decode),
upscaled to SIZE x SIZE, with a stratified train/val split:

    tools/make_digits.py OUT [--size 32] [--val_fraction 0.2] [--seed 0] [--format png|jpeg]
    -> OUT/train/<digit>/<index>.png, OUT/val/<digit>/<index>.png (.jpg with --format jpeg)

The split and the images are a pure function of the arguments. Needs scikit-learn and
Pillow (tools/setup.sh installs both)."""
import argparse
import os
import sys

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--size", type=int, default=32, help="side of the written images in pixels")
    parser.add_argument("--val_fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0, help="seed of the split")
    parser.add_argument("--format", choices=("png", "jpeg"), default="png",
                        help="png, or baseline JPEG of quality 90 with 4:2:0 chroma")
    args = parser.parse_args()
    if not 0 < args.val_fraction < 1:
        sys.exit("--val_fraction must be in (0, 1)")

    digits = load_digits()
    images = (digits.images * (255.0 / 16.0)).round().astype(np.uint8)  # 0..16 -> 0..255
    indices = np.arange(len(images))
    train, val = train_test_split(indices, test_size=args.val_fraction, random_state=args.seed,
                                  stratify=digits.target)
    for split, chosen in (("train", train), ("val", val)):
        for label in range(10):
            os.makedirs(os.path.join(args.out, split, str(label)), exist_ok=True)
        for i in sorted(chosen):
            image = Image.fromarray(images[i], mode="L").resize((args.size, args.size), Image.BILINEAR)
            path = os.path.join(args.out, split, str(digits.target[i]), f"{i:04d}")
            if args.format == "png":
                image.convert("RGB").save(path + ".png")
            else:
                # Three components (not grayscale), baseline, 4:2:0: what the data service
                # defers to the GPU.
                image.convert("RGB").save(path + ".jpg", quality=90, subsampling=2, progressive=False)
    print(f"wrote {len(train)} training and {len(val)} validation digits ({args.format}) to {args.out}")


if __name__ == "__main__":
    main()
