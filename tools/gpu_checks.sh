#!/usr/bin/env bash
# The GPU tests, run on a GPU host from the bundle (tools/bundle.sh):
#   bundle/bin/gpu_checks.sh [OUT_DIR]
# Each check prints PASS or FAIL; the last line counts them. Logs go to OUT_DIR.
set -uo pipefail
bundle="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-/tmp/stoker-gpu-checks}"
mkdir -p "$out"
source "$bundle/bin/mpi_env.sh"
stoker="$bundle/stoker"
export out stoker bundle
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
passed=0; failed=0; skipped=0

# Losses in bf16 and fp16 (with loss scaling) track fp32 over the first steps: same
# weights, same batch, one GPU.
precision_run() {
  "$stoker" trainer --device=cuda --synthetic_steps=30 --warmup_steps=0 --model=resnet18 \
    --num_classes=100 --image_size=128 --batch_size=64 --lr=0.02 --seed=5 \
    --precision="$1" --loss_log="$out/loss_$1.txt" --log_every=30
}
precision_compare() {
  python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
def losses(p): return [float(l.split()[2]) for l in open(f"{out}/loss_{p}.txt")]
ref = losses("fp32")
for p in ("bf16", "fp16"):
    got = losses(p)
    worst = max(abs(a - b) / max(abs(b), 1e-3) for a, b in zip(got[:20], ref[:20]))
    print(f"{p}: first 5 {['%.4f' % x for x in got[:5]]}, fp32 {['%.4f' % x for x in ref[:5]]}, worst relative gap over 20 steps {worst:.3f}")
    assert len(got) == len(ref) == 30, "missing steps"
    assert worst < 0.05, f"{p} loss left fp32's by {worst:.3f}"
    assert got[-1] < got[0], f"{p} loss did not fall"
PY
}
# After training on 2 GPUs the parameters are bit-identical on both ranks.
two_gpu_training() {
  rm -f "$out"/params.rank*
  "$stoker" launcher --np=2 --dataset=synthetic --synthetic_samples=2048 --synthetic_classes=10 -- \
    --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 --epochs=2 \
    --final_params_out="$out/params" --log_every=8 &&
  cmp "$out/params.rank0" "$out/params.rank1" && echo "parameters identical on both ranks"
}

# The GPU tests that are scripts (tests/*_test.sh, tag gpu) run in a tree laid out like
# their Bazel runfiles, whose programs are the bundle's (run through bundle/stoker).
runfiles_test() {  # runfiles_test SCRIPT
  local tree="$out/runfiles/stoker" p
  mkdir -p "$tree/launcher" "$tree/trainer" "$tree/data_service" "$tree/tests"
  for p in launcher/launcher trainer/trainer data_service/data_service; do
    printf '#!/usr/bin/env bash\nexec "%s" %s "$@"\n' "$stoker" "${p#*/}" > "$tree/$p"
    chmod +x "$tree/$p"
  done
  cp "$bundle"/bin/tests/*.sh "$tree/tests/"
  TEST_SRCDIR="$out/runfiles" TEST_TMPDIR="$(mktemp -d)" bash "$tree/tests/$1"
}

check() {  # check NAME COMMAND...: runs it (a program or a function below) with its output in OUT/NAME.log
  local name="$1"; shift
  echo "=== $name"
  if timeout --signal=KILL 300 bash -c "$(declare -f precision_run precision_compare two_gpu_training runfiles_test ran_unskipped); \"\$@\"" \
      check "$@" >"$out/$name.log" 2>&1; then
    echo "PASS $name"; passed=$((passed + 1))
  else
    echo "FAIL $name (exit $?)"; failed=$((failed + 1)); tail -n 30 "$out/$name.log"
  fi
}
skip() { echo "SKIP $1: $2"; skipped=$((skipped + 1)); }

echo "GPUs: $gpus"
nvidia-smi -L

check cuda_batch_feeder "$stoker" cuda_batch_feeder_test
grep -E "copies .* ms" "$out/cuda_batch_feeder.log" || true
# A gtest that skips is not a pass: ran_unskipped LOG fails when LOG has a skipped test.
ran_unskipped() { ! grep -q "SKIPPED" "$1"; }
check cuda_stream_owners "$stoker" cuda_stream_test
check cuda_stream_owners_ran ran_unskipped "$out/cuda_stream_owners.log"
grep -E "^\[ device \]|tests? ran|PASSED" "$out/cuda_stream_owners.log" || true

check precision_fp32 precision_run fp32
check precision_bf16 precision_run bf16
check precision_fp16 precision_run fp16
check precision_tracks_fp32 precision_compare
cat "$out/precision_tracks_fp32.log"

if (( gpus >= 2 )); then
  check nccl_allreduce mpirun -np 2 "$stoker" nccl_communicator_test_ranks
  check nccl_conformance mpirun -np 2 "$stoker" nccl_communicator_conformance_test_ranks
  check two_gpu_params_identical two_gpu_training
  check stalled_rank_ends_job runfiles_test fault_gpu_stall_test.sh
  grep -E "collective watchdog|exited with code|nothing of job" "$out/stalled_rank_ends_job.log" | head -n 4
else
  skip nccl_allreduce "needs 2 GPUs"
  skip nccl_conformance "needs 2 GPUs"
  skip two_gpu_params_identical "needs 2 GPUs"
  skip stalled_rank_ends_job "needs 2 GPUs"
fi
echo "$passed passed, $failed failed, $skipped skipped"
(( failed == 0 ))
