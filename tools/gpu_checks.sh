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
export out stoker
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

# A stalled rank on 2 GPUs (issue 7): SIGSTOP of rank 1 mid-training. Rank 0's collective
# watchdog (--collective_timeout_s=10) reports the collective that did not complete and
# names rank 1, aborts its communicators (NCCL: ncclCommAbort) and exits; the job ends
# non-zero within 60 s of the SIGSTOP and leaves nothing in /dev/shm.
nccl_stall() {
  local job="gpustall-$$" log="$out/nccl_stall_job.log" code=0
  rm -f "$out/stall_loss"
  "$stoker" launcher --np=2 --job_id="$job" --dataset=synthetic --synthetic_samples=200000 \
    --synthetic_classes=10 -- --model=resnet18 --num_classes=10 --image_size=64 --batch_size=64 \
    --epochs=100 --log_every=1 --loss_log="$out/stall_loss" --collective_timeout_s=10 \
    --collective_abort_grace_s=5 >"$log" 2>&1 &
  local launcher=$!
  for _ in $(seq 1200); do
    [[ -f "$out/stall_loss" && $(wc -l <"$out/stall_loss") -ge 5 ]] && break
    sleep 0.1
  done
  local pid1
  pid1=$(sed -n 's/.*rank 1 of 2 (pid \([0-9]*\)): ring.*training split/\1/p' "$log" | head -n 1)
  [[ -n "$pid1" ]] || { kill -TERM "$launcher"; tail -n 30 "$log"; echo "no pid for rank 1"; return 1; }
  kill -STOP "$pid1"
  local start=$SECONDS
  wait "$launcher" || code=$?
  local elapsed=$((SECONDS - start))
  kill -KILL "$pid1" 2>/dev/null && echo "rank 1 was still there after the job ended"
  grep "collective watchdog" "$log" | head -n 6
  echo "the launcher exited with code $code, $elapsed s after the SIGSTOP"
  [[ $code -ne 0 && $elapsed -le 60 ]] || { tail -n 40 "$log"; return 1; }
  grep -q "collective watchdog: .*rank 1 (pid $pid1): stalled" "$log" || { tail -n 40 "$log"; echo "rank 1 not named"; return 1; }
  if ls /dev/shm | grep -q "$job"; then echo "left in /dev/shm: $(ls /dev/shm | grep "$job")"; return 1; fi
  echo "nothing of job $job left in /dev/shm"
}

check() {  # check NAME COMMAND...: runs it (a program or a function below) with its output in OUT/NAME.log
  local name="$1"; shift
  echo "=== $name"
  if timeout --signal=KILL 300 bash -c "$(declare -f precision_run precision_compare two_gpu_training nccl_stall); \"\$@\"" \
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

check precision_fp32 precision_run fp32
check precision_bf16 precision_run bf16
check precision_fp16 precision_run fp16
check precision_tracks_fp32 precision_compare
cat "$out/precision_tracks_fp32.log"

if (( gpus >= 2 )); then
  check nccl_allreduce mpirun -np 2 "$stoker" nccl_communicator_test_ranks
  check two_gpu_params_identical two_gpu_training
  check nccl_stall_ends_job nccl_stall
  cat "$out/nccl_stall_ends_job.log"
else
  skip nccl_allreduce "needs 2 GPUs"
  skip two_gpu_params_identical "needs 2 GPUs"
  skip nccl_stall_ends_job "needs 2 GPUs"
fi
echo "$passed passed, $failed failed, $skipped skipped"
(( failed == 0 ))
