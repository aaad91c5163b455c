#!/usr/bin/env bash
# One device call on one H200: models exported from torchvision (tools/export_model.py, 224x224,
# 1000 classes) trained by Stoker (synthetic batches, bf16, channels_last, AdamW) beside the
# anchor's recipe under torch.compile (tools/profile_peer.py: fused AdamW; its unprofiled
# images/s are the compile figure of this call), with the kernel-class breakdown of both
# from CUPTI's records (Stoker's --kernel_trace, PyTorch's profiler). shufflenet_v2_x1_0 with
# the fused blocks on and off, against eager.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-03-models/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/models; mkdir -p "$out"
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
for arch in vit_b_16 swin_v2_t shufflenet_v2_x1_0; do
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >"$out/export_$arch.log" 2>&1 &
done
wait
elapsed; ls -la /tmp/*.pt2; tail -n 2 "$out"/export_*.log
train() {  # train NAME MODEL BATCH [FLAGS...]: 40 steps after 10 warm-up, images/s
  local name=$1 model=$2 batch=$3; shift 3
  "$b/stoker" trainer --device=cuda --model="$model" --num_classes=1000 --image_size=224 \
    --batch_size="$batch" --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4 \
    --synthetic_steps=50 --warmup_steps=10 --log_every=10 --metrics_out="$out/$name.json" "$@" \
    >"$out/$name.log" 2>&1
  echo "== $name: exit $? $(python3 -c "import json;m=json.load(open('$out/$name.json'));print('images/s', m.get('images_per_second'))" 2>&1) $(elapsed)"
  tail -n 3 "$out/$name.log"
}
train stoker_vit_b_16 /tmp/vit_b_16.pt2 128
train stoker_swin_v2_t /tmp/swin_v2_t.pt2 128
BATCH=128 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/vit_b_16.pt2 stoker:/tmp/swin_v2_t.pt2
elapsed
train stoker_shufflenet /tmp/shufflenet_v2_x1_0.pt2 256
train stoker_shufflenet_unfused /tmp/shufflenet_v2_x1_0.pt2 256 --nofused_blocks
BATCH=256 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/shufflenet_v2_x1_0.pt2:--nofused_blocks peer:shufflenet_v2_x1_0:eager
elapsed
BATCH=128 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" peer:vit_b_16:compile peer:swin_v2_t:compile
elapsed
grep -h '"what": "profile_peer"' "$out"/kernels/*.log
rm -f "$out"/kernels/*.json.gz.tmp
tar czf "${OUT:-/tmp}/models.tgz" -C "$out" .
