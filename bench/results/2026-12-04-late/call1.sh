#!/usr/bin/env bash
# One H200, main after the review clean-ups: the GPU checks of the code they touched (generated
# pointwise kernels, layer norm, FP8 linear layers, self-attention, snapshot buffers, periodic
# resume, device timeline, the exported transformers' precision and FP8 checks); tracing's
# cost with the device timeline (ResNet-50, off and on for 200 of 300 steps, twice); the
# checkpoint stall of a 1-billion-parameter ViT (12 GB with AdamW) at one checkpoint every 200
# steps, asynchronous, against none.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-04-late/call1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call1; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call1.tgz" --exclude='*.pt2' --exclude='*.json.gz' --exclude='*.stoker' \
  --exclude='trace*/*.json' -C "$out" . ; }
nvidia-smi -L
t0=$(date +%s)
elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
python3 "$b/bin/export_model.py" torchvision.models.vision_transformer:VisionTransformer --num_classes 1000 \
  --image_size 224 --kwargs '{"image_size": 224, "patch_size": 14, "num_layers": 40, "num_heads": 16, "hidden_dim": 1408, "mlp_dim": 6144}' \
  --out /tmp/stoker_export_vit_1b.pt2 >"$out/export_vit_1b.log" 2>&1 &
STOKER_GPU_CHECKS='^(pointwise_kernel|layer_norm|fp8_linear|self_attention|snapshot_buffers|resume_periodic|device_timeline|export_transformers|vit_b_16_|convnext_tiny_|swin_v2_t_)' \
  timeout 290 "$b/bin/gpu.sh" checks "$out/checks" >"$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, " "$out/gpu_checks.txt"
elapsed; save
trace_run() {  # trace_run NAME [FLAGS...]: ResNet-50, 300 synthetic steps after 10
  local name=$1; shift
  "$b/stoker" trainer --device=cuda --model=resnet50 --num_classes=1000 --image_size=224 \
    --batch_size=256 --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4 \
    --synthetic_steps=310 --warmup_steps=10 --log_every=50 --metrics_out="$out/$name.json" "$@" \
    >"$out/$name.log" 2>&1
  echo "== $name: exit $? $(python3 -c "import json;m=json.load(open('$out/$name.json'));print('images/s', m.get('images_per_second'))" 2>&1) $(elapsed)"
}
trace_run trace_off_1
trace_run trace_on_1 --trace="$out/trace1" --trace_steps=20:220
trace_run trace_off_2
trace_run trace_on_2 --trace="$out/trace2" --trace_steps=20:220
grep -h "gpu_intervals\|trace of steps" "$out"/trace_on_*.log | head -4
save
wait
timeout 200 python3 "$b/bin/bench_gpu.py" --phase checkpoint --checkpoint_models exported_vit_1b:16:200 \
  --checkpoint_modes async --out "$out/checkpoint" >"$out/checkpoint.txt" 2>&1
tail -n 6 "$out/checkpoint.txt" | cut -c1-400
elapsed; save
