"""ResNet-18 from JPEG at fixed GPU decode shares with nvJPEG allocating through the
decoder's pools (the default) and through its own cudaMalloc/cudaHostAlloc, then ResNet-50
from JPEG (auto, 2 epochs, as in the step phase) and ResNet-18 synthetic for the ratio."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from share_runs import b, resnet18_at_share, start

out, root = start()
for variant, share in [("own", 0.25), ("nvjpeg", 0.25), ("own", 0.5), ("nvjpeg", 0.5), ("own", 0.375)]:
    os.environ.pop("STOKER_EXPERIMENT_NVJPEG_ALLOC", None)
    if variant == "nvjpeg":
        os.environ["STOKER_EXPERIMENT_NVJPEG_ALLOC"] = "0"
    resnet18_at_share(out, root, f"alloc_{variant}_share{share}", share, variant=variant)
os.environ.pop("STOKER_EXPERIMENT_NVJPEG_ALLOC", None)
b.stoker_train(out, "jpeg_resnet50_1gpu", 1, "resnet50", root=root, cores=b.CORES_1GPU)
b.stoker_train(out, "synthetic_resnet18_1gpu", 1, "resnet18", synthetic_steps=b.SYNTHETIC_STEPS)
