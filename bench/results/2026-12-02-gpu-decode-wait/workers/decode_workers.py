"""With the decode workers: ResNet-18 from JPEG at fixed GPU decode shares (6 epochs, the
settled figure is the median of the last third of the progress windows), then ResNet-50 from
JPEG (auto, 2 epochs, as in the step phase) and both models synthetic for the ratios."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from share_runs import b, resnet18_at_share, start

out, root = start()
for share in (0.25, 0.5, 0.625):
    resnet18_at_share(out, root, f"workers_share{share}", share)
b.stoker_train(out, "jpeg_resnet50_1gpu", 1, "resnet50", root=root, cores=b.CORES_1GPU)
b.stoker_train(out, "synthetic_resnet50_1gpu", 1, "resnet50", synthetic_steps=b.SYNTHETIC_STEPS)
b.stoker_train(out, "synthetic_resnet18_1gpu", 1, "resnet18", synthetic_steps=b.SYNTHETIC_STEPS)
