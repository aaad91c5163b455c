"""ResNet-18 from JPEG at fixed GPU decode shares, with the copy stream at the device's
highest priority (the default) and at normal priority, and 2 or 3 staging buffers: the
settled images/s (median of the last third of the progress windows) and the trainer's
slot-to-GPU latency per batch."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from share_runs import resnet18_at_share, start

out, root = start()
variants = [("high", {}), ("normal", {"STOKER_EXPERIMENT_COPY_PRIORITY": "0"}),
            ("high_3buf", {"STOKER_EXPERIMENT_BUFFERS": "3"})]
plan = [(v, s) for v in ("high", "normal") for s in (0.25, 0.375, 0.5)] + [("high_3buf", 0.375), ("high_3buf", 0.5)]
for variant, share in plan:
    env = dict(variants)[variant]
    for k in ("STOKER_EXPERIMENT_COPY_PRIORITY", "STOKER_EXPERIMENT_BUFFERS"):
        os.environ.pop(k, None)
    os.environ.update(env)
    resnet18_at_share(out, root, f"exp_{variant}_share{share}", share, variant=variant)
for k in ("STOKER_EXPERIMENT_COPY_PRIORITY", "STOKER_EXPERIMENT_BUFFERS"):
    os.environ.pop(k, None)
