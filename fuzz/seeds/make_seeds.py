"""Writes the checked-in seed corpora of the fuzz targets over model files (run from the
repository root with the torch and safetensors that tools/setup.sh installs):

  python3 fuzz/seeds/make_seeds.py

safetensors/: small state dicts of every dtype kind, an empty and a scalar tensor, none.
export_archive/: a small CNN exported by tools/export_model.py (train and eval programs,
batch norm, dropout) and a plain torch.export.save archive (models/model.json), each as the
archive itself and as a bundle of its records (fuzz/export_archive_fuzzer.cc's format).
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import torch
from safetensors.torch import save_file
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

TINY_NET = '''
import torch
from torch import nn

class TinyNet(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(4, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)))
'''


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 4 * 4, 2)

    def forward(self, x):
        return self.fc(x.flatten(1))


def safetensors_seeds(out):
    save_file({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)},
              f"{out}/two_f32.safetensors")
    save_file({"a": torch.tensor([1, -2], dtype=torch.int64),
               "h": torch.zeros(2, 2, dtype=torch.float16),
               "bf": torch.ones(1, dtype=torch.bfloat16), "m": torch.tensor([True, False]),
               "u": torch.tensor([7], dtype=torch.uint8), "i8": torch.tensor([-1], dtype=torch.int8),
               "s": torch.tensor(3.0, dtype=torch.float64)},
              f"{out}/every_dtype.safetensors", metadata={"format": "pt"})
    save_file({"empty": torch.zeros(0, 4), "scalar": torch.tensor(1.5)},
              f"{out}/empty_and_scalar.safetensors")
    save_file({}, f"{out}/no_tensors.safetensors")


def bundle(archive):
    """The archive's records (without their top folder) as name NUL length content."""
    out = bytearray()
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            name = info.filename.split("/", 1)[1]
            data = z.read(info)
            out += name.encode() + b"\0" + struct.pack("<I", len(data)) + data
    return bytes(out)


def archive_seeds(out):
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/tiny_net.py", "w") as f:
            f.write(TINY_NET)
        subprocess.run([sys.executable, f"{ROOT}/tools/export_model.py", "tiny_net:TinyNet",
                        "--num_classes=2", "--image_size=8", f"--out={out}/tiny_net.pt2"],
                       cwd=tmp, check=True)
    exported = torch.export.export(Flat().eval(), (torch.randn(2, 3, 4, 4),),
                                   dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    torch.export.save(exported, f"{out}/plain_linear.pt2")
    for name in ("tiny_net", "plain_linear"):
        with open(f"{out}/{name}.bundle", "wb") as f:
            f.write(bundle(f"{out}/{name}.pt2"))


def main():
    for corpus, write in (("safetensors", safetensors_seeds), ("export_archive", archive_seeds)):
        out = os.path.join(HERE, corpus)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        write(out)
        for name in os.listdir(out):
            os.chmod(os.path.join(out, name), 0o644)


if __name__ == "__main__":
    main()
