#!/usr/bin/env bash
# The entry point on a GPU host that has torch, CUDA, NCCL and Open MPI but no Bazel, run
# from the bundle (tools/bundle.sh copies it to bundle/bin/gpu.sh):
#   bundle/bin/gpu.sh checks [OUT]
#       The GPU test suite (bin/gpu_checks.sh): each check prints PASS, FAIL or SKIP, the
#       last line counts them, logs go to OUT (default /tmp/stoker-gpu-checks).
#       STOKER_GPU_CHECKS=REGEX runs only the checks whose names match it.
#   bundle/bin/gpu.sh smoke [OUT]
#       The checks, the README's demo from the bundle (data service + 2 ranks), a one-GPU
#       ResNet-50 synthetic run and a one-GPU ResNet-18 run from JPEG. Logs go to OUT
#       (default /tmp/smoke).
#   bundle/bin/gpu.sh bench OUT [--BENCH_FLAG...] STEP...
#       STEP: checks, report, or a phase of bin/bench_gpu.py (data_service, one_gpu,
#       one_gpu_anchor, step, exported, profile, two_gpu, hybrid, packed, checkpoint). The
#       --flags (e.g. --quick, --gpu_decode_share=0,auto) go to every phase. Prints a short summary per step; the whole output of
#       each, bench.jsonl and the report are in OUT.
#   bundle/bin/gpu.sh kernels OUT CASE...
#       Kernel-class breakdown of the training step from CUPTI's kernel records (Stoker's
#       --kernel_trace, PyTorch's profiler), Stoker's step and the Python recipe's over the
#       same number of steady-state steps (PROFILE_STEPS, default 3; batch BATCH, default
#       256), classified by bin/kernel_breakdown.py; the traces stay in OUT (.json.gz).
#       CASE: stoker:<model or .pt2>[:<extra trainer flags, comma-separated>]
#           | peer:<arch>[:eager|compile|reduce-overhead (default compile)]
#   bundle/bin/gpu.sh trace OUT [--TRAINER_FLAG...]
#       A traced ResNet-50 job (launcher + data service + one rank per GPU, at most 2) from
#       a JPEG image folder made here (the anchor generator's; synthetic without it), with
#       --trace=OUT/trace: merges the trace, checks it (bin/check_trace.py), draws
#       OUT/trace_timeline.png (bin/trace_timeline.py) and prints the verdict lines. The
#       flags (e.g. --nocuda_graphs, which shows each bucket's reduction) go to the trainer.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$(dirname "$here")"
stoker="$bundle/stoker"
export PYTHONUNBUFFERED=1

# The comment at the top of this file, up to the first line that is not a comment.
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
# make_jpeg DIR PER_CLASS: an ImageFolder of 10 classes from the anchors' generator.
make_jpeg() {
  python3 -c "import sys; sys.path.insert(0, '$bundle/anchors'); import anchor_seed; anchor_seed.make_data('$1', 10, $2)"
}

checks() {  # checks [OUT]
  "$here/gpu_checks.sh" "$@"
}

smoke() {  # smoke [OUT]
  local out="${1:-/tmp/smoke}"
  mkdir -p "$out"
  source "$here/mpi_env.sh"
  nvidia-smi -L
  python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'
  local missing
  missing=$(LD_LIBRARY_PATH="$bundle/lib" ldd "$here/trainer" | grep "not found" || true)
  echo "libraries not found without torch's path (expected: torch, cuda, nccl only): ${missing:-none}"
  "$here/gpu_checks.sh" "$out/checks" 2>&1 | tee "$out/gpu_checks.log"
  echo "=== demo from the bundle (the README's demo: data service + 2 ranks)"
  "$stoker" launcher --np=2 --dataset=synthetic --synthetic_samples=4096 --synthetic_classes=10 -- \
    --model=small_cnn --num_classes=10 --image_size=32 --batch_size=64 --epochs=3 --lr=0.05 \
    --log_every=8 2>&1 | tee "$out/demo.log"
  echo "demo exit code ${PIPESTATUS[0]}" | tee -a "$out/demo.log"
  echo "=== ResNet-50 synthetic, one GPU"
  "$stoker" trainer --device=cuda --synthetic_steps=30 --model=resnet50 --batch_size=256 \
    --image_size=224 --num_classes=1000 --optimizer=adamw --lr=1e-3 2>&1 | tail -n 6 |
    tee "$out/resnet50_synthetic.log"
  echo "=== ResNet-18 from JPEG, one GPU (a small ImageFolder made by the anchor generator)"
  make_jpeg /tmp/smoke_jpeg/train 300
  "$stoker" launcher --np=1 --dataset=imagefolder --train_dir=/tmp/smoke_jpeg/train \
    --val_dir=/tmp/smoke_jpeg/train --data_threads=14 -- --model=resnet18 --num_classes=10 \
    --image_size=224 --batch_size=256 --epochs=2 --data_split=val --optimizer=adamw --lr=1e-3 \
    --log_every=4 --warmup_steps=4 2>&1 | tail -n 12 | tee "$out/resnet18_jpeg.log"
}

bench() {  # bench OUT [--BENCH_FLAG...] STEP...
  local out="$1"; shift
  local flags=() steps=() arg step
  for arg in "$@"; do
    if [[ $arg == --* ]]; then flags+=("$arg"); else steps+=("$arg"); fi
  done
  mkdir -p "$out"
  nvidia-smi -L
  # The CPUs (cores, threads per core, NUMA): the data service's figures depend on them.
  lscpu > "$out/lscpu.txt" 2>&1
  grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)" "$out/lscpu.txt"
  for step in "${steps[@]}"; do
    echo "=== $step ($(date +%T))"
    case "$step" in
      checks)
        "$here/gpu_checks.sh" /tmp/stoker-gpu-checks > "$out/gpu_checks.log" 2>&1
        echo "gpu checks: exit $?"
        grep -E "^(PASS|FAIL|SKIP|[0-9]+ passed)" "$out/gpu_checks.log" ;;
      report)
        python3 "$here/bench_gpu.py" --phase report --out "$out" ;;
      *)
        python3 "$here/bench_gpu.py" --phase "$step" --out "$out" "${flags[@]}" |
          grep -E '^\[bench [0-9:]+\] (\{"who"|exit|checkpoint:)' | cut -c1-400 ;;
    esac
  done
}

kernels() {  # kernels OUT CASE...
  local out="$1"; shift
  mkdir -p "$out"
  local steps=${PROFILE_STEPS:-3} batch=${BATCH:-256}
  local case kind what extra name start cmd more
  for case in "$@"; do
    IFS=: read -r kind what extra <<<"$case"
    name="${kind}_$(basename "${what%.pt2}")${extra:+_${extra//[,=-]/}}"
    if [[ $kind == stoker ]]; then
      cmd=("$stoker" trainer --device=cuda --model="$what" --num_classes=1000 --image_size=224
           --batch_size="$batch" --precision=bf16 --optimizer=adamw --lr=1e-3 --weight_decay=1e-4
           --synthetic_steps=$((steps + 13)) --warmup_steps=10 --profile_steps="$steps" --log_every=10
           --kernel_trace="$out/$name.json")
      [[ -n $extra ]] && IFS=, read -ra more <<<"$extra" && cmd+=("${more[@]}")
    else
      cmd=(python3 "$here/profile_peer.py" --arch "$what" --batch "$batch" --steps "$steps"
           --mode "${extra:-compile}" --trace "$out/$name.json")
    fi
    echo "== $name: ${cmd[*]}"
    start=$(date +%s)
    "${cmd[@]}" >"$out/$name.log" 2>&1
    echo "exit $? after $(( $(date +%s) - start )) s"
    tail -3 "$out/$name.log"
    python3 "$here/kernel_breakdown.py" "$out/$name.json" --steps "$steps" \
      --json "$out/$name.breakdown.json" | tee "$out/$name.txt"
    gzip -f "$out/$name.json"
  done
}

trace() {  # trace OUT [--TRAINER_FLAG...]
  local out="$1"; shift
  mkdir -p "$out"
  rm -rf "$out/trace"
  source "$here/mpi_env.sh"
  nvidia-smi -L
  local gpus ranks dataset=()
  gpus=$(nvidia-smi -L | grep -c "^GPU")
  ranks=$(( gpus >= 2 ? 2 : 1 ))
  if [[ -f "$bundle/anchors/anchor_seed.py" ]]; then
    local data=/tmp/stoker_trace_jpeg/train
    [[ -d $data ]] || make_jpeg "$data" 800
    dataset=(--dataset=imagefolder --train_dir="$data" --data_threads=$(( 14 * ranks )))
    echo "=== traced ResNet-50 from JPEG ($data, 8000 images), $ranks rank(s)"
  else
    dataset=(--dataset=synthetic --synthetic_samples=8000 --synthetic_classes=10)
    echo "=== traced ResNet-50 from synthetic images (no JPEG maker in the bundle), $ranks rank(s)"
  fi
  # Steps 12..19 traced: after the warm-up and the CUDA graphs' capture.
  "$stoker" launcher --np="$ranks" "${dataset[@]}" --trace="$out/trace" --trace_steps=12:20 -- \
    --model=resnet50 --num_classes=10 --image_size=224 --batch_size=256 --epochs=1 \
    --optimizer=adamw --lr=1e-3 --warmup_steps=4 --log_every=4 "$@" 2>&1 | tee "$out/trace_job.log"
  echo "job exit code ${PIPESTATUS[0]}"
  local merged="$out/trace/job_trace.json"
  [[ -s $merged ]] || "$stoker" launcher trace merge "$out/trace"
  python3 "$here/check_trace.py" "$merged" --ranks="$ranks" --data_services=1
  python3 "$here/trace_timeline.py" "$merged" "$out/trace_timeline.png" --steps=3 &&
    echo "timeline: $out/trace_timeline.png (trace: $merged)"
  echo "=== verdicts"
  grep -E "trace verdict|bound by|verdict" "$out/trace_job.log" | cut -c1-300 | tail -n 12
}

command="${1:-}"
(( $# )) && shift
case "$command" in
  checks|smoke) "$command" "$@" ;;
  bench|kernels|trace) (( $# >= 1 )) || usage; "$command" "$@" ;;
  *) usage ;;
esac
