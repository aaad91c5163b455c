#!/usr/bin/env bash
# On a GPU host, from the repository root with bundle/ carried: the GPU checks, the demo
# from the bundle, and a one-GPU ResNet-50 synthetic run. Logs go to $1 (default /tmp/smoke).
set -uo pipefail
out="${1:-/tmp/smoke}"
mkdir -p "$out"
source bundle/bin/mpi_env.sh
nvidia-smi -L
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
missing=$(LD_LIBRARY_PATH=bundle/lib ldd bundle/bin/trainer | grep "not found" || true)
echo "libraries not found without torch's path (expected: torch, cuda, nccl only): ${missing:-none}"
bundle/bin/gpu_checks.sh /tmp/checks 2>&1 | tee "$out/gpu_checks.log"
echo "=== demo from the bundle (the README's demo: data service + 2 ranks)"
bundle/stoker launcher --np=2 --dataset=synthetic --synthetic_samples=4096 --synthetic_classes=10 -- \
  --model=small_cnn --num_classes=10 --image_size=32 --batch_size=64 --epochs=3 --lr=0.05 \
  --log_every=8 2>&1 | tee "$out/demo.log"
echo "demo exit code ${PIPESTATUS[0]}" | tee -a "$out/demo.log"
echo "=== ResNet-50 synthetic, one GPU"
bundle/stoker trainer --device=cuda --synthetic_steps=30 --model=resnet50 --batch_size=256 \
  --image_size=224 --num_classes=1000 --optimizer=adamw --lr=1e-3 2>&1 | tail -n 6 | tee "$out/resnet50_synthetic.log"
tar czf "$out/checks.tgz" -C /tmp checks
echo "=== ResNet-18 from JPEG, one GPU (a small ImageFolder made by the anchor generator)"
python3 -c "import sys; sys.path.insert(0, 'bundle/anchors'); import anchor_seed; anchor_seed.make_data('/tmp/smoke_jpeg/train', 10, 300)"
bundle/stoker launcher --np=1 --dataset=imagefolder --train_dir=/tmp/smoke_jpeg/train \
  --val_dir=/tmp/smoke_jpeg/train --data_threads=14 -- --model=resnet18 --num_classes=10 \
  --image_size=224 --batch_size=256 --epochs=2 --data_split=val --optimizer=adamw --lr=1e-3 \
  --log_every=4 --warmup_steps=4 2>&1 | tail -n 12 | tee "$out/resnet18_jpeg.log"
