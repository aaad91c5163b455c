#!/usr/bin/env bash
# Kernel-class breakdown of one training step on one H200: Stoker training models exported
# from torchvision (graph runner, synthetic batches, bf16, channels_last, AdamW) against
# torch.compile (default mode) on the same model and batch, each under Nsight Compute over
# one steady-state step (tools/kernel_breakdown.py classifies the kernels).
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-03-model-breakdown/call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
out=/tmp/breakdown; mkdir -p "$out"
b="$(pwd)/bundle"
ncu_bin="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
nvidia-smi -L
t0=$(date +%s)
profile() {  # profile NAME COMMAND...
  local name=$1; shift
  if (( $(date +%s) - t0 > 440 )); then echo "== $name: skipped (out of the call's time)"; return; fi
  local start=$(date +%s)
  timeout 150 "$ncu_bin" --profile-from-start off --clock-control none --csv --print-units base \
    --metrics "$metrics" "$@" >"/tmp/$name.csv" 2>"$out/$name.err"
  echo "== $name: ncu exit $? after $(( $(date +%s) - start )) s"
  tail -2 "$out/$name.err"
  python3 "$b/bin/kernel_breakdown.py" "/tmp/$name.csv" --steps 1 --json "$out/$name.json" | tee "$out/$name.txt"
  gzip -c "/tmp/$name.csv" > "$out/$name.csv.gz"
}
for spec in vit_b_16:128 convnext_tiny:256; do
  arch=${spec%:*}; batch=${spec#*:}
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >/dev/null 2>"$out/export_$arch.err" || { echo "export $arch failed"; tail -3 "$out/export_$arch.err"; }
  profile "stoker_$arch" "$b/stoker" trainer --device=cuda --model="/tmp/$arch.pt2" --num_classes=1000 \
    --image_size=224 --batch_size=$batch --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4 \
    --synthetic_steps=14 --warmup_steps=10 --profile_steps=1 --log_every=10
  profile "compile_$arch" python3 "$b/bin/profile_peer.py" --arch "$arch" --batch $batch --steps 1 --compile
done
profile "compile_swin_v2_t" python3 "$b/bin/profile_peer.py" --arch swin_v2_t --batch 128 --steps 1 --compile
tar czf "${OUT:-/tmp}/breakdown.tgz" -C "$out" .
