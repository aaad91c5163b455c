"""With the decode workers: ResNet-18 from JPEG at fixed GPU decode shares (6 epochs, the
settled figure is the median of the last third of the progress windows), then ResNet-50 from
JPEG (auto, 2 epochs, as in the step phase) and both models synthetic for the ratios."""
import os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "bundle", "bin"))
import bench_gpu as b

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
root = b.dataset(12000)
for share in (0.25, 0.5, 0.625):
    name = f"workers_share{share}"
    jsonl = os.path.join(b.WORK, name + ".jsonl")
    if os.path.exists(jsonl):
        os.remove(jsonl)
    r = b.stoker_train(out, name, 1, "resnet18", root=root, cores=b.CORES_1GPU, epochs=6, quiet=True,
                       extra=(f"--gpu_decode_share={share}", "--metrics_jsonl=" + jsonl))
    r["settled_images_per_second"], _ = b.settled_rate(jsonl)
    r["share"] = share
    b.record(out, **r)
b.stoker_train(out, "jpeg_resnet50_1gpu", 1, "resnet50", root=root, cores=b.CORES_1GPU)
b.stoker_train(out, "synthetic_resnet50_1gpu", 1, "resnet50", synthetic_steps=b.SYNTHETIC_STEPS)
b.stoker_train(out, "synthetic_resnet18_1gpu", 1, "resnet18", synthetic_steps=b.SYNTHETIC_STEPS)
