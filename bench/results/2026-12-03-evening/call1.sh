#!/usr/bin/env bash
# One device call on one H200 (bundle of main at 6116809): the three GPU checks that failed
# in the previous run (their fixes had not run on the GPU), the trace's cost on a ResNet-50
# step (off, and on for 200 of 300 steps), and kernel breakdowns of exported convnext_tiny
# and swin_v2_t, Stoker's step beside torch.compile's.
# Run from the repository root with bundle/ carried: bash bench/results/2026-12-03-evening/call1.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
b="$(pwd)/bundle"; out=/tmp/call1; mkdir -p "$out"
save() { tar czf "${OUT:-/tmp}/call1.tgz" --exclude='*.pt2' -C "$out" . ; }
t0=$(date +%s); elapsed() { echo "[$(( $(date +%s) - t0 )) s]"; }
nvidia-smi -L
for arch in convnext_tiny swin_v2_t; do
  python3 "$b/bin/export_model.py" "torchvision.models:$arch" --num_classes 1000 --image_size 224 \
    --out "/tmp/$arch.pt2" >"$out/export_$arch.log" 2>&1 &
done
STOKER_GPU_CHECKS='^(layer_norm|resume_bitwise|exported_resume_bitwise|export_resnet18)' \
  timeout 200 "$b/bin/gpu.sh" checks "$out/checks" > "$out/gpu_checks.txt" 2>&1
grep -E "^(PASS|FAIL|SKIP)|passed, " "$out/gpu_checks.txt"; elapsed; save
trace_run() {  # trace_run NAME [FLAGS...]: ResNet-50, 300 synthetic steps after 10
  local name=$1; shift
  "$b/stoker" trainer --device=cuda --model=resnet50 --num_classes=1000 --image_size=224 \
    --batch_size=256 --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4 \
    --synthetic_steps=310 --warmup_steps=10 --log_every=50 --metrics_out="$out/$name.json" "$@" \
    >"$out/$name.log" 2>&1
  echo "== $name: exit $? $(python3 -c "import json;m=json.load(open('$out/$name.json'));print('images/s', m.get('images_per_second'))" 2>&1) $(elapsed)"
}
trace_run trace_off_1
trace_run trace_on_1 --trace="$out/trace" --trace_steps=20:220
trace_run trace_off_2
trace_run trace_on_2 --trace="$out/trace2" --trace_steps=20:220
ls -la "$out/trace" | head; save
wait
BATCH=256 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/convnext_tiny.pt2 peer:convnext_tiny:compile >"$out/kernels_cnx.log" 2>&1
grep -E "kernels over|busy" "$out"/kernels/*.txt; elapsed; save
BATCH=128 PROFILE_STEPS=3 "$b/bin/gpu.sh" kernels "$out/kernels" stoker:/tmp/swin_v2_t.pt2 peer:swin_v2_t:compile >"$out/kernels_swin.log" 2>&1
grep -E "kernels over|busy" "$out"/kernels/*.txt; elapsed; save
