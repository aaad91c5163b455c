"""What this folder's experiment scripts share: bench_gpu from the bundle the scripts run
beside (./bundle/bin), the output folder and JPEG dataset, and one ResNet-18 run from JPEG at
a fixed GPU decode share whose settled images/s (the median of the last third of the
progress windows) is recorded with the run."""
import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "bundle", "bin"))
import bench_gpu as b  # noqa: E402


def start():
    """Makes the output folder (argv[1]) and the 12,000-image dataset; returns both."""
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    return out, b.dataset(12000)


def resnet18_at_share(out, root, name, share, **fields):
    """Trains ResNet-18 for 6 epochs on one GPU at GPU decode share `share` and records the
    run with its settled images/s, `fields` and the share."""
    jsonl = os.path.join(b.WORK, name + ".jsonl")
    if os.path.exists(jsonl):
        os.remove(jsonl)
    r = b.stoker_train(out, name, 1, "resnet18", root=root, cores=b.CORES_1GPU, epochs=6, quiet=True,
                       extra=(f"--gpu_decode_share={share}", "--metrics_jsonl=" + jsonl))
    r["settled_images_per_second"], _ = b.settled_rate(jsonl)
    r.update(fields)
    r["share"] = share
    b.record(out, **r)
