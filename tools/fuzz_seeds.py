"""Seed corpora for tools/fuzz.sh: valid control messages (and near misses) for the control
protocol fuzzer, and small JPEG and PNG files of every kind the decoders handle for the image
fuzzer. Usage: fuzz_seeds.py CONTROL_DIR IMAGE_DIR."""
import io
import os
import struct
import sys
import zlib

from PIL import Image

# data_service/ring/wire_types.h: ControlMessage, 360 bytes, little-endian.
MESSAGE = struct.Struct("<IHHIiiiiiiBB2xqQqqQi4xQq256s")
assert MESSAGE.size == 360
MAGIC, VERSION = 0x4C435453, 3
REGISTER, REGISTERED, START_EPOCH, EPOCH_STARTED, ERROR = 1, 2, 3, 4, 5
BAD_SAMPLE, BAD_SAMPLE_COUNTED = 6, 7


def message(kind, request_id=1, status=0, rank=0, world=2, batch=32, image=32, slots=4,
            train=1, drop_last=0, epoch=0, seed=0, samples=0, batches=0, ring_bytes=0,
            num_classes=0, arena=0, sample_index=0, text=b"", magic=MAGIC, version=VERSION):
    return MESSAGE.pack(magic, version, kind, request_id, status, rank, world, batch, image,
                        slots, train, drop_last, epoch, seed, samples, batches, ring_bytes,
                        num_classes, arena, sample_index, text.ljust(256, b"\0")[:256])


def control_seeds():
    yield "register", message(REGISTER)
    yield "register_val", message(REGISTER, rank=1, train=0, drop_last=1, image=224, batch=256)
    yield "register_huge", message(REGISTER, batch=1 << 16, image=8192, slots=1024)
    yield "register_negative", message(REGISTER, rank=-1, world=-5, batch=-1, slots=0)
    yield "registered", message(REGISTERED, ring_bytes=1 << 20, text=b"/stoker.job.ring.0")
    yield "start_epoch", message(START_EPOCH, request_id=2, epoch=3, seed=1234)
    yield "epoch_started", message(EPOCH_STARTED, epoch=3, samples=100, batches=4)
    yield "error", message(ERROR, status=3, text=b"bad request")
    yield "error_bad_code", message(ERROR, status=99, text=b"x")
    yield "unterminated", message(ERROR, status=3, text=b"y" * 256)
    yield "bad_magic", message(REGISTER, magic=0x12345678)
    yield "bad_version", message(REGISTER, version=1)
    yield "register_classes", message(REGISTER, num_classes=1000)
    yield "register_arena", message(REGISTER, arena=256 << 20)
    yield "bad_sample", message(BAD_SAMPLE, request_id=3, epoch=1, sample_index=42,
                                text=b"nvJPEG: bad JPEG")
    yield "bad_sample_negative", message(BAD_SAMPLE, sample_index=-7)
    yield "bad_sample_counted", message(BAD_SAMPLE_COUNTED, request_id=3, text=b"/data/a.jpg")
    yield "truncated", message(REGISTER)[:100]
    yield "oversized", message(REGISTER) + b"\xff" * 64
    yield "length_prefix_huge", struct.pack("<Q", 1 << 62) + message(REGISTER)


def adam7_png(img):
    """An Adam7-interlaced 8-bit RGB PNG (Pillow writes none), filter type 0 on every row."""
    w, h = img.size
    px = img.load()
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)]
    raw = bytearray()
    for x0, y0, dx, dy in passes:
        xs = range(x0, w, dx)
        if not xs:
            continue
        for y in range(y0, h, dy):
            raw.append(0)
            for x in xs:
                raw.extend(px[x, y])
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)) +
            chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


def image_seeds():
    rgb = Image.new("RGB", (37, 29))
    for y in range(29):
        for x in range(37):
            rgb.putpixel((x, y), (x * 7 % 256, y * 9 % 256, (x * y) % 256))
    def save(img, fmt, **kw):
        b = io.BytesIO()
        img.save(b, fmt, **kw)
        return b.getvalue()
    yield "rgb.jpg", save(rgb, "JPEG", quality=85)
    yield "rgb444.jpg", save(rgb, "JPEG", quality=95, subsampling=0)
    yield "progressive.jpg", save(rgb, "JPEG", progressive=True)
    yield "gray.jpg", save(rgb.convert("L"), "JPEG")
    yield "cmyk.jpg", save(rgb.convert("CMYK"), "JPEG")
    yield "big.jpg", save(rgb.resize((300, 200)), "JPEG", quality=70)
    yield "rgb.png", save(rgb, "PNG")
    yield "rgba.png", save(rgb.convert("RGBA"), "PNG")
    yield "gray.png", save(rgb.convert("L"), "PNG")
    yield "gray_alpha.png", save(rgb.convert("LA"), "PNG")
    yield "palette.png", save(rgb.convert("P"), "PNG")
    yield "bilevel.png", save(rgb.convert("1"), "PNG")
    yield "gray16.png", save(rgb.convert("I;16"), "PNG")
    yield "optimized.png", save(rgb, "PNG", optimize=True)
    yield "interlaced.png", adam7_png(rgb)
    yield "tiny.png", save(Image.new("RGB", (1, 1), (1, 2, 3)), "PNG")
    yield "tiny.jpg", save(Image.new("RGB", (1, 1), (1, 2, 3)), "JPEG")


def main():
    control_dir, image_dir = sys.argv[1:3]
    for directory, seeds in ((control_dir, control_seeds()), (image_dir, image_seeds())):
        os.makedirs(directory, exist_ok=True)
        for name, data in seeds:
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
