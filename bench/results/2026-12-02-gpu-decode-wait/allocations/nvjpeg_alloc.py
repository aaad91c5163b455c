"""ResNet-18 from JPEG at fixed GPU decode shares with nvJPEG allocating through the
decoder's pools (the default) and through its own cudaMalloc/cudaHostAlloc, then ResNet-50
from JPEG (auto, 2 epochs, as in the step phase) and ResNet-18 synthetic for the ratio."""
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "bundle", "bin"))
import bench_gpu as b

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
root = b.dataset(12000)
for variant, share in [("own", 0.25), ("nvjpeg", 0.25), ("own", 0.5), ("nvjpeg", 0.5), ("own", 0.375)]:
    os.environ.pop("STOKER_EXPERIMENT_NVJPEG_ALLOC", None)
    if variant == "nvjpeg":
        os.environ["STOKER_EXPERIMENT_NVJPEG_ALLOC"] = "0"
    name = f"alloc_{variant}_share{share}"
    jsonl = os.path.join(b.WORK, name + ".jsonl")
    if os.path.exists(jsonl):
        os.remove(jsonl)
    r = b.stoker_train(out, name, 1, "resnet18", root=root, cores=b.CORES_1GPU, epochs=6, quiet=True,
                       extra=(f"--gpu_decode_share={share}", "--metrics_jsonl=" + jsonl))
    r["settled_images_per_second"], _ = b.settled_rate(jsonl)
    r["variant"], r["share"] = variant, share
    b.record(out, **r)
os.environ.pop("STOKER_EXPERIMENT_NVJPEG_ALLOC", None)
b.stoker_train(out, "jpeg_resnet50_1gpu", 1, "resnet50", root=root, cores=b.CORES_1GPU)
b.stoker_train(out, "synthetic_resnet18_1gpu", 1, "resnet18", synthetic_steps=b.SYNTHETIC_STEPS)
