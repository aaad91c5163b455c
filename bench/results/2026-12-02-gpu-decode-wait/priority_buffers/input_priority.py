"""ResNet-18 from JPEG at fixed GPU decode shares, with the copy stream at the device's
highest priority (the default) and at normal priority, and 2 or 3 staging buffers: the
settled images/s (median of the last third of the progress windows) and the trainer's
slot-to-GPU latency per batch."""
import json, os, re, sys
sys.path.insert(0, os.path.join(os.getcwd(), "bundle", "bin"))
import bench_gpu as b

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
root = b.dataset(12000)
variants = [("high", {}), ("normal", {"STOKER_EXPERIMENT_COPY_PRIORITY": "0"}),
            ("high_3buf", {"STOKER_EXPERIMENT_BUFFERS": "3"})]
plan = [(v, s) for v in ("high", "normal") for s in (0.25, 0.375, 0.5)] + [("high_3buf", 0.375), ("high_3buf", 0.5)]
for variant, share in plan:
    env = dict(variants)[variant]
    for k in ("STOKER_EXPERIMENT_COPY_PRIORITY", "STOKER_EXPERIMENT_BUFFERS"):
        os.environ.pop(k, None)
    os.environ.update(env)
    name = f"exp_{variant}_share{share}"
    jsonl = os.path.join(b.WORK, name + ".jsonl")
    if os.path.exists(jsonl):
        os.remove(jsonl)
    r = b.stoker_train(out, name, 1, "resnet18", root=root, cores=b.CORES_1GPU, epochs=6, quiet=True,
                       extra=(f"--gpu_decode_share={share}", "--metrics_jsonl=" + jsonl))
    r["settled_images_per_second"], _ = b.settled_rate(jsonl)
    r["variant"], r["share"] = variant, share
    b.record(out, **r)
for k in ("STOKER_EXPERIMENT_COPY_PRIORITY", "STOKER_EXPERIMENT_BUFFERS"):
    os.environ.pop(k, None)
