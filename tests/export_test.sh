#!/usr/bin/env bash
# The weights the trainer exports (--export) are what Python users open: after a short
# ResNet-18 run, torch.load reads the file, torchvision's resnet18 loads it with
# load_state_dict(strict=True), and gives the same logits (1e-5, fp32) as the trainer's
# own model, restored from the run's final checkpoint, on the same batch.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test export

run_synthetic_job 2 "$job" 128 10 --model=resnet18 --image_size=32 --batch_size=8 --epochs=1 \
  --lr=0.05 --val_every=0 --checkpoint_dir="$out/ckpt" --export="$out/resnet18.pt" 2>&1 | tee "$out/log"
assert_nothing_left "$job"
[[ -f "$out/resnet18.pt" ]] || { echo "FAIL: no exported weights"; exit 1; }
checkpoint=$(ls "$out"/ckpt/ckpt-*.stoker | tail -n 1)
"$root/trainer/checkpoint/checkpoint_logits" --checkpoint="$checkpoint" --model=resnet18 --num_classes=10 \
  --image_size=32 --batch=4 --input_out="$out/x.f32" --logits_out="$out/y.f32"

"$(stoker_python)" - "$out/resnet18.pt" "$out/x.f32" "$out/y.f32" <<'PY'
import sys
import numpy as np
import torch
import torchvision

state = torch.load(sys.argv[1])  # weights_only=True, the default
model = torchvision.models.resnet18(num_classes=10)
missing, unexpected = model.load_state_dict(state, strict=True)
assert not missing and not unexpected
assert int(state["bn1.num_batches_tracked"]) == 8, state["bn1.num_batches_tracked"]  # 64 samples / 8
model.eval()
x = torch.from_numpy(np.fromfile(sys.argv[2], dtype=np.float32).reshape(4, 3, 32, 32))
expected = torch.from_numpy(np.fromfile(sys.argv[3], dtype=np.float32).reshape(4, 10))
with torch.no_grad():
    logits = model(x)
diff = (logits - expected).abs().max().item()
print(f"torchvision resnet18 with the exported weights: max |logit difference| {diff:.2e}")
assert torch.allclose(logits, expected, rtol=1e-5, atol=1e-5), (logits, expected)
PY
echo "PASS"
