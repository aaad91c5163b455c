#!/usr/bin/env bash
# The sbatch templates of launcher/slurm/, run as sbatch would run them on the first node of
# an allocation (SLURM_* set by hand) with the launcher in --dry_run: each must be valid bash
# and must come to the srun command its #SBATCH lines ask for. Each asks to be requeued and
# for SIGUSR1 to the batch shell before the time limit, and `exec`s the launcher, so that the
# signal reaches the launcher (which stops at a step boundary with a checkpoint).
set -euo pipefail
root="${TEST_SRCDIR}/stoker"
out="${TEST_TMPDIR:-$(mktemp -d)}"
# srun is looked up on PATH (a dry run never starts it; the command names it as given).
mkdir -p "$out/bin"
printf '#!/bin/sh\necho "srun must not run in a dry run" >&2; exit 1\n' > "$out/bin/srun"
chmod +x "$out/bin/srun"

# check TEMPLATE NODES: the srun line of the template's dry run under a NODES-node allocation
# made from its own #SBATCH lines.
check() {
  local template="$root/launcher/slurm/$1" nodes="$2"
  bash -n "$template"
  local tasks gpus cpus
  tasks=$(sed -n 's/^#SBATCH --ntasks-per-node=//p' "$template")
  gpus=$(sed -n 's/^#SBATCH --gpus-per-node=//p' "$template")
  cpus=$(sed -n 's/^#SBATCH --cpus-per-task=//p' "$template")
  [[ "$(sed -n 's/^#SBATCH --nodes=//p' "$template")" == "$nodes" ]] ||
    { echo "FAIL: $1 does not ask for $nodes node(s)"; exit 1; }
  grep -qx -- "#SBATCH --requeue" "$template" || { echo "FAIL: $1 has no #SBATCH --requeue"; exit 1; }
  grep -qxE -- "#SBATCH --signal=B:USR1@[0-9]+" "$template" ||
    { echo "FAIL: $1 has no #SBATCH --signal=B:USR1@<seconds>"; exit 1; }
  grep -qE '^exec \$STOKER_LAUNCHER ' "$template" ||
    { echo "FAIL: $1 does not exec the launcher (the batch shell's signals must reach it)"; exit 1; }
  env -i PATH="$out/bin:/usr/bin:/bin" HOME="$out" \
    SLURM_JOB_ID=4242 SLURM_JOB_NUM_NODES="$nodes" SLURM_NTASKS_PER_NODE="$tasks" \
    SLURM_GPUS_ON_NODE="$gpus" SLURM_CPUS_PER_TASK="$cpus" \
    STOKER_LAUNCHER="$root/launcher/launcher" \
    STOKER_LAUNCHER_ARGS="--dry_run --job_id=tmpl --trainer=/opt/stoker/bin/trainer" \
    bash "$template" > "$out/$1.out" 2>&1 || { cat "$out/$1.out"; echo "FAIL: $1"; exit 1; }
  cat "$out/$1.out"
  local expected="srun --nodes=$nodes --ntasks=$((nodes * tasks)) --ntasks-per-node=$tasks"
  expected+=" --kill-on-bad-exit=1 --export=ALL --cpus-per-task=$cpus --gpu-bind=none"
  expected+=" /opt/stoker/bin/trainer --job_id=tmpl --seed=0"
  expected+=" '--data_service_args=--dataset=imagefolder --train_dir=/data/imagenet/train"
  expected+=" --val_dir=/data/imagenet/val' --model=resnet50"
  grep -qF -- "NCCL_NVLS_ENABLE=0 $expected" "$out/$1.out" ||
    { echo "FAIL: $1: expected the command line"; echo "  NCCL_NVLS_ENABLE=0 $expected"; exit 1; }
  echo "$1: OK"
}

check one_node_8gpus.sbatch 1
check multi_node.sbatch 4
echo "PASS"
