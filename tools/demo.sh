#!/usr/bin/env bash
# The README's demo command: installs what is missing (tools/setup.sh), builds the three
# programs, and trains the built-in demo end to end: one data service serving a
# synthetic dataset, and 2 trainer ranks under mpirun (on GPUs if there are two, else on
# the CPU), with progress on the terminal. Extra arguments go to the trainer.
set -euo pipefail
cd "$(dirname "$0")/.."
STOKER_SETUP_QUIET=1 tools/setup.sh
bazel build //launcher //trainer //data_service
# Open MPI refuses to run as root unless told; the demo says so for the user.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1 NCCL_NVLS_ENABLE=0
exec bazel-bin/launcher/launcher \
  --np=2 \
  --dataset=synthetic --synthetic_samples=4096 --synthetic_classes=10 \
  -- \
  --model=small_cnn --num_classes=10 --image_size=32 --batch_size=64 --epochs=3 \
  --lr=0.05 --log_every=8 "$@"
