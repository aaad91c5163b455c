#!/usr/bin/env bash
# Convergence on real data: scikit-learn's handwritten digits as an ImageFolder of PNGs
# (tools/make_digits.py: 1437 training, 360 validation images, upscaled to 32x32), trained
# by 2 CPU ranks with the small CNN (torchvision's RandomResizedCrop + flip augmentation in
# the data service), must reach >= 95% top-1 on the validation split (rank 0's metrics
# JSON lines). Also checks what the run leaves for people: TensorBoard's own
# EventAccumulator reads the scalars the trainer wrote (the same values as the JSON lines),
# tools/plot_metrics.py draws the curves, and the exported small CNN state dict loads
# (strict) into its PyTorch twin, which classifies the validation PNGs about as well.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
job="digits-$$-$RANDOM"

"$python" "$root/tools/make_digits.py" "$out/digits"
"$root/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=imagefolder --train_dir="$out/digits/train" --val_dir="$out/digits/val" \
  --data_threads=1 -- \
  --model=small_cnn --num_classes=10 --image_size=32 --batch_size=32 --epochs=30 \
  --optimizer=sgd --lr=0.2 --nesterov --weight_decay=5e-4 --no_decay_bn_bias \
  --lr_schedule=cosine --warmup_epochs=1 --val_every=3 --log_every=11 \
  --metrics_jsonl="$out/metrics.jsonl" --tensorboard_dir="$out/tb" --export="$out/digits_cnn.pt" \
  2>&1 | tee "$out/log"
assert_nothing_left "$job"
# The curve and its data are kept with the test's outputs (docs/digits_curve.png is one).
kept="${TEST_UNDECLARED_OUTPUTS_DIR:-$out}"
"$python" "$root/tools/plot_metrics.py" "$out/metrics.jsonl" "$kept/digits_curve.png" \
  --title "scikit-learn digits, small CNN, 2 CPU ranks (tests/digits_convergence_test.sh)"
cp "$out/metrics.jsonl" "$kept/digits_metrics.jsonl"

"$python" - "$out" <<'PY'
import glob, json, os, sys
import numpy as np
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

out = sys.argv[1]
records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
val = [r for r in records if r["type"] == "val"]
final = val[-1]
print(f"validation top-1 by epoch: {[(r['epoch'], round(100 * r['top1'], 1)) for r in val]}")
assert final["epoch"] == 30 and final["samples"] == 360, final
assert final["top1"] >= 0.95, f"final validation top-1 {final['top1']:.4f} < 0.95"

# TensorBoard reads the same scalars back.
events = EventAccumulator(os.path.join(out, "tb"))
events.Reload()
tags = set(events.Tags()["scalars"])
assert {"train/loss", "train/lr", "val/top1", "val/top5", "val/loss"} <= tags, tags
tb_top1 = {e.step: e.value for e in events.Scalars("val/top1")}
for r in val:
    assert abs(tb_top1[r["global_step"]] - r["top1"]) < 1e-6, (r, tb_top1)
train = [r for r in records if r["type"] == "train"]
tb_loss = {e.step: e.value for e in events.Scalars("train/loss")}
assert len(tb_loss) == len(train) and all(abs(tb_loss[r["global_step"]] - r["loss"]) < 1e-5 for r in train)
print(f"TensorBoard read {len(tb_loss)} loss and {len(tb_top1)} top-1 scalars, equal to the JSON lines")

# The exported weights: the small CNN's own state dict, in its PyTorch twin.
class SmallCnn(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        widths = [3, 16, 32, 64]
        for i in range(3):
            setattr(self, f"conv{i + 1}", torch.nn.Conv2d(widths[i], widths[i + 1], 3, stride=2, padding=1, bias=False))
            setattr(self, f"bn{i + 1}", torch.nn.BatchNorm2d(widths[i + 1]))
        self.fc = torch.nn.Linear(64, classes)

    def forward(self, x):
        for i in range(3):
            x = torch.relu(getattr(self, f"bn{i + 1}")(getattr(self, f"conv{i + 1}")(x)))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))

state = torch.load(os.path.join(out, "digits_cnn.pt"))
model = SmallCnn(10)
model.load_state_dict(state, strict=True)
model.eval()
assert list(state) == list(model.state_dict()), list(state)
# The data service's evaluation transform: Resize(round(32 * 256 / 224) = 37), CenterCrop(32).
mean = np.array([0.485, 0.456, 0.406], np.float32)
std = np.array([0.229, 0.224, 0.225], np.float32)
correct = total = 0
for path in sorted(glob.glob(os.path.join(out, "digits", "val", "*", "*.png"))):
    image = Image.open(path).convert("RGB").resize((37, 37), Image.BILINEAR).crop((2, 2, 34, 34))
    x = (np.asarray(image, np.float32) / 255 - mean) / std
    with torch.no_grad():
        predicted = model(torch.from_numpy(x).permute(2, 0, 1)[None]).argmax(1).item()
    correct += predicted == int(os.path.basename(os.path.dirname(path)))
    total += 1
print(f"the exported model in PyTorch: {correct}/{total} = {100 * correct / total:.1f}% top-1 "
      f"(the trainer measured {100 * final['top1']:.1f}%)")
assert correct / total >= final["top1"] - 0.03
PY
echo "PASS"
