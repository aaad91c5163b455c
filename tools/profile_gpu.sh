#!/usr/bin/env bash
# Kernel-class breakdown of the training step on the GPU host, from the bundle: Stoker's
# step and the Python recipe's (eager or torch.compile), each under Nsight Compute over the
# same number of steady-state steps, classified by tools/kernel_breakdown.py.
# Usage: bundle/bin/profile_gpu.sh OUT_DIR [CASE...]
#   CASE: stoker:<model>[:<extra trainer flags, comma-separated>] | peer:<arch>[:compile]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"; shift
mkdir -p "$out"
ncu_bin="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
[[ -x "$ncu_bin" ]] || { echo "profile_gpu: no ncu on this host" >&2; exit 1; }
steps=${PROFILE_STEPS:-2}
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
for case in "$@"; do
  IFS=: read -r kind what extra <<<"$case"
  name="${kind}_${what}${extra:+_${extra//[,=-]/}}"
  if [[ $kind == stoker ]]; then
    cmd=("$here/../stoker" trainer --device=cuda --model="$what" --num_classes=1000 --image_size=224
         --batch_size=256 --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4
         --synthetic_steps=16 --warmup_steps=10 --profile_steps=$steps --log_every=10)
    [[ -n $extra ]] && IFS=, read -ra more <<<"$extra" && cmd+=("${more[@]}")
  else
    cmd=(python3 "$here/profile_peer.py" --arch "$what" --steps $steps ${extra:+--compile})
  fi
  echo "== $name: ${cmd[*]}"
  start=$(date +%s)
  "$ncu_bin" --profile-from-start off --clock-control none --csv --print-units base \
    --metrics "$metrics" "${cmd[@]}" >"$out/$name.csv" 2>"$out/$name.err"
  echo "ncu exit $? after $(( $(date +%s) - start )) s"
  tail -3 "$out/$name.err"
  python3 "$here/kernel_breakdown.py" "$out/$name.csv" --steps $steps --json "$out/$name.json" | tee "$out/$name.txt"
done
