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

# Losses over the first 30 steps of a run on varied batches (the data service's synthetic
# dataset, one GPU): bf16 and fp16 with the fused blocks, and bf16 without them, against
# the plain fp32 path (same weights, same batches).
precision_run() {  # precision_run NAME PRECISION [TRAINER FLAGS...]
  local name="$1" precision="$2"; shift 2
  "$stoker" launcher --np=1 --dataset=synthetic --synthetic_samples=1920 --synthetic_classes=100 --seed=5 -- --model=resnet18 --num_classes=100 --image_size=128 \
    --batch_size=64 --epochs=1 --lr=0.005 --precision="$precision" \
    --loss_log="$out/loss_$name.txt" --log_every=30 "$@"
}
precision_compare() {
  python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
def losses(p): return [float(l.split()[2]) for l in open(f"{out}/loss_{p}.txt")]
ref = losses("fp32_plain")
failures = []
for p in ("bf16_fused", "fp16_fused", "bf16_plain"):
    got = losses(p)
    gaps = [abs(a - b) / max(abs(b), 1e-3) for a, b in zip(got, ref)]
    print(f"{p}: first 5 {['%.4f' % x for x in got[:5]]}, last {got[-1]:.4f}; fp32 plain first 5 "
          f"{['%.4f' % x for x in ref[:5]]}, last {ref[-1]:.4f}; worst relative gap over {len(got)} "
          f"steps {max(gaps):.3f} (at step {gaps.index(max(gaps)) + 1})")
    if len(got) != 30 or len(ref) != 30: failures.append(f"{p}: missing steps")
    if max(gaps) >= 0.05: failures.append(f"{p} loss left fp32's by {max(gaps):.3f}")
    if sum(got[-5:]) >= sum(got[:5]): failures.append(f"{p} loss did not fall")
assert not failures, "; ".join(failures)
PY
}
# Stopped after 20 steps and resumed, a deterministic run with the fused blocks gives the
# uninterrupted run's losses bit for bit.
resume_run() {  # resume_run NAME [FLAGS...]
  local name="$1"; shift
  "$stoker" launcher --np=1 --dataset=synthetic --synthetic_samples=1280 --synthetic_classes=10 --seed=9 -- --model=resnet18 --num_classes=10 --image_size=64 \
    --batch_size=64 --epochs=2 --deterministic --log_every=20 "$@"
}
resume_bitwise() {
  rm -rf "$out/resume_ckpt" "$out"/loss_resume_*.txt
  resume_run whole --loss_log="$out/loss_resume_whole.txt" || return 1
  resume_run first --loss_log="$out/loss_resume_first.txt" --checkpoint_dir="$out/resume_ckpt" \
    --stop_after_steps=20
  local rc=$?
  (( rc == 75 )) || { echo "the stopped run exited $rc, expected 75"; return 1; }
  resume_run rest --loss_log="$out/loss_resume_rest.txt" --checkpoint_dir="$out/resume_ckpt" \
    --resume=auto &&
  cat "$out/loss_resume_first.txt" "$out/loss_resume_rest.txt" > "$out/loss_resume_joined.txt" &&
  echo "steps: $(wc -l < "$out/loss_resume_whole.txt") whole, $(wc -l < "$out/loss_resume_joined.txt") stopped + resumed" &&
  cmp "$out/loss_resume_whole.txt" "$out/loss_resume_joined.txt" && echo "losses identical bit for bit"
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
  if timeout --signal=KILL 300 bash -c "$(declare -f precision_run precision_compare resume_run resume_bitwise two_gpu_training runfiles_test ran_unskipped); \"\$@\"" \
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

check gpu_jpeg_decoder "$stoker" gpu_jpeg_decoder_gpu_test
check gpu_jpeg_decoder_ran ran_unskipped "$out/gpu_jpeg_decoder.log"
grep -E "^\[ hybrid \]|tests? ran|PASSED|FAILED" "$out/gpu_jpeg_decoder.log" || true

check fused_blocks "$stoker" fused_blocks_gpu_test
check fused_blocks_ran ran_unskipped "$out/fused_blocks.log"
grep -E "^\[ fused \]|tests? ran|PASSED|FAILED" "$out/fused_blocks.log" || true
check precision_fp32_plain precision_run fp32_plain fp32 --nofused_blocks
check precision_bf16_fused precision_run bf16_fused bf16
check precision_fp16_fused precision_run fp16_fused fp16
check precision_bf16_plain precision_run bf16_plain bf16 --nofused_blocks
check precision_tracks_fp32 precision_compare
cat "$out/precision_tracks_fp32.log"
check resume_bitwise resume_bitwise
grep -E "^steps|identical|differ" "$out/resume_bitwise.log" || true

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
