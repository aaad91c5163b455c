"""Writes test images and their Pillow / torchvision reference outputs for the C++ tests
of //data_service/image. Run by the tests inside TEST_TMPDIR:

  make_image_cases.py formats DIR   decode cases: image file + Pillow's convert("RGB")
  make_image_cases.py bad DIR       malformed files, each with the reason it is bad
  make_image_cases.py eval DIR      Resize(256) + CenterCrop(224) references
  make_image_cases.py train DIR     resized_crop (+ hflip) references for given params
  make_image_cases.py rrc DIR N     N draws of RandomResizedCrop's parameters per size
  make_image_cases.py resize DIR    PNGs and their transforms.Resize(256) references
  make_image_cases.py entropy DIR   JPEGs whose entropy-coded data covers every kind of
                                    code: noise at several qualities, every subsampling,
                                    optimised tables, restart markers, CMYK, progressive

Each command writes DIR/manifest.txt, one case per line, whitespace-separated fields.
Reference pixels are raw uint8 HWC RGB files (*.rgb).
"""

import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def natural_image(width, height, seed):
    """Smooth gradients + low-frequency texture + shapes + sensor-like noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.zeros((height, width, 3), np.float32)
    for c in range(3):
        a, b, off = rng.uniform(-1, 1, 3)
        base[..., c] = 128 + 70 * (a * xx / width + b * yy / height) + 30 * off
    small = rng.uniform(0, 255, (max(2, height // 40), max(2, width // 40), 3))
    texture = np.asarray(
        Image.fromarray(small.astype(np.uint8)).resize((width, height), Image.BICUBIC),
        np.float32)
    img = Image.fromarray(np.clip(0.55 * base + 0.45 * texture, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(14):
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=color)
        else:
            draw.line([x0, y0, x1, y1], fill=color, width=int(rng.integers(1, 6)))
    img = img.filter(ImageFilter.GaussianBlur(0.8))
    arr = np.asarray(img, np.float32) + rng.normal(0, 3.0, (height, width, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def save_raw(path, img):
    arr = np.ascontiguousarray(np.asarray(img, np.uint8))
    assert arr.ndim == 3 and arr.shape[2] == 3, arr.shape
    with open(path, "wb") as f:
        f.write(arr.tobytes())
    return arr


def jpeg_bytes(img, **kwargs):
    buf = io.BytesIO()
    img.save(buf, format="JPEG", **kwargs)
    return buf.getvalue()


def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def write_png(path, arr, bit_depth, color_type, interlaced=False):
    """A minimal PNG writer for what Pillow cannot write: 16-bit RGB, Adam7 interlace."""
    arr = np.asarray(arr)
    height, width = arr.shape[:2]
    dtype = ">u2" if bit_depth == 16 else np.uint8

    def raw_rows(sub):
        rows = []
        for row in sub:
            rows.append(b"\x00" + np.ascontiguousarray(row.astype(dtype)).tobytes())
        return b"".join(rows)

    if interlaced:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                  (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b"".join(raw_rows(arr[y0::dy, x0::dx]) for x0, y0, dx, dy in passes
                       if arr[y0::dy, x0::dx].size)
    else:
        raw = raw_rows(arr)
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0,
                       1 if interlaced else 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                png_chunk(b"IDAT", zlib.compress(raw, 6)) + png_chunk(b"IEND", b""))


def pil_rgb(path):
    with Image.open(path) as im:
        return im.convert("RGB")


def save_case_image(img, out, name):
    """img saved as out/name: a JPEG of quality 90 for a .jpg name, else as the name's
    ending says. Returns the path."""
    path = os.path.join(out, name)
    if name.endswith(".jpg"):
        img.save(path, quality=90)
    else:
        img.save(path)
    return path


def write_manifest(out, lines):
    """out/manifest.txt: the cases, one a line."""
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------------------

def cmd_formats(out):
    lines = []
    base = natural_image(120, 90, seed=1)

    def add(name, expected, note):
        save_raw(os.path.join(out, name + ".rgb"), expected)
        lines.append(f"{name} {note}")

    def add_pil(name, note):
        add(name, pil_rgb(os.path.join(out, name)), note)

    base.save(os.path.join(out, "rgb420.jpg"), quality=90)
    add_pil("rgb420.jpg", "jpeg")
    base.save(os.path.join(out, "rgb444.jpg"), quality=90, subsampling=0)
    add_pil("rgb444.jpg", "jpeg")
    base.save(os.path.join(out, "rgb422.jpg"), quality=90, subsampling=1)
    add_pil("rgb422.jpg", "jpeg")
    base.save(os.path.join(out, "progressive.jpg"), quality=90, progressive=True)
    add_pil("progressive.jpg", "jpeg")
    base.convert("L").save(os.path.join(out, "gray.jpg"), quality=90)
    add_pil("gray.jpg", "jpeg")
    base.convert("CMYK").save(os.path.join(out, "cmyk.jpg"), quality=95)
    add_pil("cmyk.jpg", "jpeg")
    # Odd sizes exercise partial MCUs at the right and bottom edges.
    natural_image(37, 23, seed=2).save(os.path.join(out, "odd.jpg"), quality=90)
    add_pil("odd.jpg", "jpeg")

    base.save(os.path.join(out, "rgb.png"))
    add_pil("rgb.png", "png")
    base.quantize(colors=50).save(os.path.join(out, "palette.png"))
    add_pil("palette.png", "png")
    pal = base.quantize(colors=16)
    pal.info["transparency"] = 3
    pal.save(os.path.join(out, "palette_trns.png"), transparency=3)
    add_pil("palette_trns.png", "png")
    rgba = base.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(base.size))
    rgba.save(os.path.join(out, "rgba.png"))
    add_pil("rgba.png", "png")
    la = base.convert("L")
    la.putalpha(Image.linear_gradient("L").transpose(Image.ROTATE_90).resize(base.size))
    la.save(os.path.join(out, "la.png"))
    add_pil("la.png", "png")
    base.convert("L").save(os.path.join(out, "gray.png"))
    add_pil("gray.png", "png")
    base.convert("1").save(os.path.join(out, "bilevel.png"))
    add_pil("bilevel.png", "png")
    rng = np.random.default_rng(3)
    deep = (np.asarray(base, np.uint16) * 257 + rng.integers(0, 257, (90, 120, 3))).astype(
        np.uint16)
    write_png(os.path.join(out, "rgb16.png"), deep, 16, 2)
    add_pil("rgb16.png", "png")
    # Pillow clips 16-bit grayscale to 255 (Note [16-bit grayscale PNG] in decode.cc);
    # the reference is the high byte instead.
    gray16 = deep[..., 1]
    write_png(os.path.join(out, "gray16.png"), gray16, 16, 0)
    add("gray16.png", np.repeat((gray16 >> 8).astype(np.uint8)[..., None], 3, axis=2),
        "png-high-byte")
    write_png(os.path.join(out, "interlaced.png"), np.asarray(base), 8, 2, interlaced=True)
    add_pil("interlaced.png", "png")
    # A PNG under a .jpg name and a JPEG under a .png name: the bytes decide.
    base.save(os.path.join(out, "really_png.jpg"), format="PNG")
    add_pil("really_png.jpg", "png")
    base.save(os.path.join(out, "really_jpeg.png"), format="JPEG", quality=90)
    add_pil("really_jpeg.png", "jpeg")
    write_manifest(out, lines)


def cmd_bad(out):
    good = jpeg_bytes(natural_image(160, 120, seed=4), quality=90)
    cases = {}
    cases["empty.jpg"] = b""
    cases["text.jpg"] = b"This is a text file, not an image.\n" * 3
    cases["gif.jpg"] = b"GIF89a\x10\x00\x10\x00" + b"\x00" * 40
    cases["truncated.jpg"] = good[: len(good) * 6 // 10]
    cases["truncated_header.jpg"] = good[:100]
    cases["soi_only.jpg"] = good[:3]
    # SOF0's sample precision set to 12 bits: libjpeg refuses the header.
    sof = good.index(b"\xff\xc0")
    cases["corrupt_header.jpg"] = good[: sof + 4] + b"\x0c" + good[sof + 5:]
    # A DHT table claiming more codes than exist.
    dht = good.index(b"\xff\xc4")
    cases["corrupt_huffman.jpg"] = good[: dht + 5] + b"\xff" * 16 + good[dht + 21:]
    # A marker in the middle of the entropy-coded data.
    sos = good.index(b"\xff\xda")
    mid = sos + (len(good) - sos) // 2
    cases["corrupt_scan.jpg"] = good[:mid] + b"\xff\xc4" + good[mid:]
    # Decompression bombs: tiny files whose headers claim 60000 x 60000 pixels.
    cases["bomb.jpg"] = (good[: sof + 5] + struct.pack(">HH", 60000, 60000) +
                         good[sof + 9:])
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    cases["bomb.png"] = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                         png_chunk(b"IDAT", zlib.compress(b"\x00" * 1000)) +
                         png_chunk(b"IEND", b""))
    buf = io.BytesIO()
    natural_image(64, 48, seed=5).save(buf, format="PNG")
    png = buf.getvalue()
    cases["truncated.png"] = png[: len(png) // 2]
    # The IDAT chunk's CRC (after its length, type and data) damaged.
    idat = png.index(b"IDAT")
    crc = idat + 4 + struct.unpack(">I", png[idat - 4: idat])[0]
    cases["bad_crc.png"] = png[:crc] + bytes([png[crc] ^ 0xFF]) + png[crc + 1:]
    cases["png_signature_only.png"] = png[:8]
    for name, data in cases.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    write_manifest(out, cases)
    with open(os.path.join(out, "good.jpg"), "wb") as f:
        f.write(good)
    with open(os.path.join(out, "good.png"), "wb") as f:
        f.write(png)


EVAL_SIZES = [(500, 375), (375, 500), (640, 480), (1024, 768), (2000, 1500), (333, 1000),
              (4000, 300), (300, 200), (256, 256), (224, 224), (99, 73), (257, 1003)]


def cmd_eval(out):
    from torchvision.transforms import v2
    transform = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])
    lines = []
    for n, (w, h) in enumerate(EVAL_SIZES):
        img = natural_image(w, h, seed=100 + n)
        for ext in ("jpg", "png"):
            name = f"eval_{w}x{h}.{ext}"
            path = save_case_image(img, out, name)
            save_raw(path + ".rgb", transform(pil_rgb(path)))
            lines.append(f"{name} {w} {h}")
    # Grayscale and CMYK JPEGs through the same transform.
    img = natural_image(500, 375, seed=99)
    img.convert("L").save(os.path.join(out, "eval_gray.jpg"), quality=90)
    img.convert("CMYK").save(os.path.join(out, "eval_cmyk.jpg"), quality=90)
    for name in ("eval_gray.jpg", "eval_cmyk.jpg"):
        path = os.path.join(out, name)
        save_raw(path + ".rgb", transform(pil_rgb(path)))
        lines.append(f"{name} 500 375")
    write_manifest(out, lines)


def cmd_resize(out):
    """PNGs and torchvision's transforms.Resize(256) of each: pack_imagefolder
    --max_short_side's reference (shrink_test)."""
    from torchvision import transforms
    resize = transforms.Resize(256)
    lines = []
    for n, (w, h) in enumerate([(500, 375), (375, 500), (640, 480), (1024, 683), (300, 257)]):
        img = natural_image(w, h, seed=300 + n)
        name = f"resize_{w}x{h}.png"
        path = os.path.join(out, name)
        img.save(path)
        small = resize(pil_rgb(path))
        save_raw(path + ".rgb", small)
        lines.append(f"{name} {small.width} {small.height}")
    write_manifest(out, lines)


def cmd_train(out):
    import torch
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F
    torch.manual_seed(7)
    size = 224
    lines = []
    for n, (w, h) in enumerate([(500, 375), (375, 500), (1200, 900), (180, 140)]):
        img = natural_image(w, h, seed=200 + n)
        for ext in ("jpg", "png"):
            name = f"train_{w}x{h}.{ext}"
            path = save_case_image(img, out, name)
            decoded = pil_rgb(path)
            rrc = v2.RandomResizedCrop(size, antialias=True)
            params = [rrc.make_params([decoded]) for _ in range(6)]
            boxes = [(p["top"], p["left"], p["height"], p["width"]) for p in params]
            boxes += [(0, 0, h, w), (h - 1, w - 1, 1, 1), (0, w // 3, h, w // 5)]
            for k, (top, left, ch, cw) in enumerate(boxes):
                flip = k % 2
                result = F.resized_crop(decoded, top, left, ch, cw, [size, size], antialias=True)
                if flip:
                    result = F.horizontal_flip(result)
                ref = f"{name}.{k}.rgb"
                save_raw(os.path.join(out, ref), result)
                lines.append(f"{name} {ref} {top} {left} {ch} {cw} {flip}")
    write_manifest(out, lines)


RRC_SIZES = [(500, 375), (1000, 100), (100, 1000), (64, 64), (3, 2)]


def cmd_rrc(out, draws):
    import torch
    from torchvision.transforms import v2
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    lines = []
    for w, h in RRC_SIZES:
        img = Image.new("RGB", (w, h))
        rrc = v2.RandomResizedCrop(224)
        name = f"rrc_{w}x{h}.txt"
        with open(os.path.join(out, name), "w") as f:
            for _ in range(draws):
                p = rrc.make_params([img])
                f.write(f"{p['top']} {p['left']} {p['height']} {p['width']}\n")
        lines.append(f"{name} {w} {h}")
    write_manifest(out, lines)


def cmd_entropy(out):
    """name installs: whether Stoker's Huffman decoder takes the file (jpeg_huffman.h)."""
    lines = []
    rng = np.random.default_rng(7)
    photo = natural_image(203, 157, seed=3)
    noise = Image.fromarray(rng.integers(0, 256, size=(157, 203, 3), dtype=np.uint8))
    cases = [
        ("photo_q90_420.jpg", photo, dict(quality=90), 1),
        ("photo_q100_444.jpg", photo, dict(quality=100, subsampling=0), 1),
        ("photo_q50_422.jpg", photo, dict(quality=50, subsampling=1), 1),
        ("photo_q75_optimised.jpg", photo, dict(quality=75, optimize=True), 1),
        # Uniform noise at quality 100: the largest coefficients and the longest codes.
        ("noise_q100_444.jpg", noise, dict(quality=100, subsampling=0), 1),
        ("noise_q100_optimised.jpg", noise, dict(quality=100, optimize=True), 1),
        ("noise_q95_420.jpg", noise, dict(quality=95), 1),
        ("gray_noise_q98.jpg", noise.convert("L"), dict(quality=98), 1),
        ("cmyk_noise_q90.jpg", noise.convert("CMYK"), dict(quality=90), 1),
        ("restarts.jpg", photo, dict(quality=90, restart_marker_blocks=3), 0),
        ("progressive.jpg", photo, dict(quality=90, progressive=True), 0),
    ]
    for name, image, options, installs in cases:
        image.save(os.path.join(out, name), **options)
        lines.append(f"{name} {installs}")
    write_manifest(out, lines)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    command, out = argv[1], argv[2]
    os.makedirs(out, exist_ok=True)
    if command in ("formats", "bad", "eval", "train", "resize", "entropy"):
        globals()["cmd_" + command](out)
    elif command == "rrc":
        cmd_rrc(out, int(argv[3]))
    else:
        sys.exit(f"unknown command {command!r}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv)
