#!/usr/bin/env python3
"""Prints the operators that torchvision's classification models use, exported as
tools/export_model.py exports them (training and evaluation programs), one
`aten::name.overload` a line, sorted: the set trainer/graph/operator_allowlist.cc must admit.

    tools/list_model_operators.py [--models resnet18,vit_b_16] [--verbose]

Models that do not export at a small image size are skipped (and named on stderr).
"""

import argparse
import sys

import torch
import torchvision
from torch.export import Dim

# Image sizes and constructor arguments for models that cannot take 32x32 images.
IMAGE_SIZE = {"alexnet": 64, "inception_v3": 75, "maxvit_t": 224, "vit_h_14": 28}
SMALL_IMAGE = 32


def model_and_size(name):
    kwargs = {"num_classes": 10}
    size = IMAGE_SIZE.get(name, SMALL_IMAGE)
    if name.startswith("vit_"):
        kwargs["image_size"] = size
    if name == "inception_v3":  # the auxiliary head needs 299x299 images, and is a second output
        kwargs.update(init_weights=False, aux_logits=False)
    return torchvision.models.get_model(name, **kwargs), size


def operator_name(target):
    """torch.ops.aten.add.Tensor -> aten::add.Tensor; the overload "default" is left off."""
    if isinstance(target, torch._ops.OpOverload):
        schema = target._schema
        return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__name__', target)}"


def model_operators(name):
    model, size = model_and_size(name)
    operators = set()
    for training in (True, False):
        model.train(training)
        example = torch.randn(2, 3, size, size)
        program = torch.export.export(model, (example,), dynamic_shapes=({0: Dim("batch")},))
        for node in program.graph.nodes:
            if node.op == "call_function":
                operators.add(operator_name(node.target))
    return operators


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--verbose", action="store_true", help="name each model as it exports")
    args = parser.parse_args()
    names = args.models.split(",") if args.models else torchvision.models.list_models(
        module=torchvision.models)
    operators = set()
    for name in names:
        try:
            found = model_operators(name)
        except Exception as error:  # a model torch.export cannot capture
            print(f"skipped {name}: {type(error).__name__}: {str(error).splitlines()[0][:200]}",
                  file=sys.stderr)
            continue
        if args.verbose:
            print(f"{name}: {len(found)} operators", file=sys.stderr)
        operators |= found
    for op in sorted(operators):
        print(op)


if __name__ == "__main__":
    main()
