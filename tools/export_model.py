#!/usr/bin/env python3
"""Exports a PyTorch image classifier for Stoker's trainer (`--model=model.pt2`).

    tools/export_model.py torchvision.models:resnet50 --num_classes 1000 --image_size 224 \
        --out resnet50.pt2
    tools/export_model.py mypackage.nets:MyNet --num_classes 10 --image_size 32 \
        --kwargs '{"width": 64}' --weights init.pt --out mynet.pt2

`module:Class` is anything callable that builds the nn.Module (a class or a factory
function); it is called as Class(num_classes=N, **kwargs). The archive holds, under the
state-dict names:
- the training-mode program (`models/train.json`: batch norm updating its statistics,
  dropout on), exported with torch.export and a dynamic batch dimension;
- the evaluation-mode program (`models/eval.json`), which reads the same weight records;
- the initial weights: the module's own initialisation (after --seed), or --weights.
It is a torch.export archive: `torch.export.pt2_archive._package.load_pt2` reads it, and
Stoker also trains a plain `torch.export.save` archive of a training-mode export.
"""

import argparse
import importlib
import json
import os
import sys

import torch
from torch.export import Dim
from torch.export.pt2_archive import _package as pt2


def build_model(spec, num_classes, kwargs):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise SystemExit(f"export_model: '{spec}' is not module:Class")
    sys.path.insert(0, os.getcwd())
    target = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target(num_classes=num_classes, **kwargs)


def export(model, image_size, batch, training):
    model.train(training)
    example = torch.randn(batch, 3, image_size, image_size)
    # The data service feeds batches of any size (the last one of an epoch, validation):
    # only the batch dimension is dynamic.
    return torch.export.export(model, (example,), dynamic_shapes=({0: Dim("batch")},))


def write_archive(path, train_program, eval_program):
    """A pt2 archive of both programs; the evaluation program shares the weight records
    (the layout `package_pt2` writes, less the second copy of the weights)."""
    with pt2.PT2ArchiveWriter(path) as writer:
        weights = pt2._package_state_dict("train", train_program, writer)
        for name, program in (("train", train_program), ("eval", eval_program)):
            pt2._package_payload_config(writer, weights, pt2.WEIGHTS_CONFIG_FILENAME_FORMAT.format(name))
            constants = pt2._package_constants(name, program, writer)
            pt2._package_payload_config(writer, constants, pt2.CONSTANTS_CONFIG_FILENAME_FORMAT.format(name))
            artifact = pt2.serialize(program)
            writer.write_bytes(pt2.MODELS_FILENAME_FORMAT.format(name), artifact.exported_program)
            writer.write_bytes(pt2.SAMPLE_INPUTS_FILENAME_FORMAT.format(name), artifact.example_inputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="module:Class (or module:factory), called with num_classes=N and --kwargs")
    parser.add_argument("--num_classes", type=int, required=True)
    parser.add_argument("--image_size", type=int, required=True, help="square image side the trainer feeds")
    parser.add_argument("--out", required=True, help="the archive to write (model.pt2)")
    parser.add_argument("--kwargs", default="{}", help="JSON object of further constructor arguments")
    parser.add_argument("--weights", default="", help="state dict (torch.save or .safetensors) to start from")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before building the module")
    parser.add_argument("--batch", type=int, default=2, help="batch size of the example input (any >= 2)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    model = build_model(args.model, args.num_classes, json.loads(args.kwargs))
    if args.weights:
        if args.weights.endswith(".safetensors"):
            from safetensors.torch import load_file
            state = load_file(args.weights)
        else:
            state = torch.load(args.weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_program = export(model, args.image_size, args.batch, training=True)
    eval_program = export(model, args.image_size, args.batch, training=False)
    for name, value in model.state_dict().items():
        if not torch.equal(value, before[name]):
            raise SystemExit(f"export_model: exporting changed {name}")
    if list(train_program.state_dict) != list(eval_program.state_dict):
        raise SystemExit("export_model: the training and evaluation programs have different weights")
    write_archive(args.out, train_program, eval_program)
    ops = sorted({str(n.target) for n in train_program.graph.nodes if n.op == "call_function"})
    print(f"export_model: wrote {args.out}: {len(train_program.state_dict)} tensors, "
          f"{len(ops)} operators: {', '.join(ops)}")


if __name__ == "__main__":
    main()
