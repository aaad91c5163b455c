#!/usr/bin/env bash
# A whole Slurm requeue, through the fake srun (launcher/testing/fake_srun.sh, which runs
# the real trainer as one task), once for each signal that stops a job with a checkpoint:
# the job runs under Slurm's variables; SIGTERM (scancel, a preemption), SIGUSR1 or SIGUSR2
# (the warning before the time limit, --signal=B:USR1@N) to the launcher make the rank stop
# at a step boundary with a checkpoint within --stop_grace, and the launcher exits 128 + the
# signal (143, 138, 140); SIGUSR1 to the rank itself (--signal=USR1@N, which Slurm sends to
# the job steps) does the same, and the job exits 138. Each time the requeued run
# (SLURM_RESTART_COUNT=1, the same command) says so, resumes by itself (--resume=auto) from
# that checkpoint and finishes, its losses continuing where the first run stopped. Nothing
# of either run is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
export STOKER_FAKE_OUT="$out/fake"
mkdir -p "$STOKER_FAKE_OUT"
samples=1000  # 31 steps an epoch (drop_last_batch), 2 epochs: four short sequences

run() {  # run NAME RESTART_COUNT: the job $job in the background, checkpoints in $ckpt; $pid
  local name="$1" restarts="$2"
  env SLURM_JOB_ID=77 SLURM_JOB_NUM_NODES=1 SLURM_NNODES=1 SLURM_NTASKS_PER_NODE=1 \
    SLURM_RESTART_COUNT="$restarts" \
    "$root/launcher/launcher" --mode=slurm --srun="$root/launcher/testing/fake_srun.sh" \
    --np=1 --job_id="$job" --stop_grace=60s --trainer="$root/trainer/trainer" \
    --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples=$samples --synthetic_classes=4 --data_threads=1 -- \
    --device=cpu --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --epochs=2 \
    --lr=0.05 --log_every=5 --checkpoint_dir="$ckpt" --loss_log="$out/$name.txt" \
    > "$out/$name.log" 2>&1 &
  pid=$!
}

# sequence SIGNAL TARGET EXPECTED_CODE: a first run stopped by SIGNAL (TERM, USR1, USR2) sent
# to TARGET (launcher or rank) mid-epoch exits EXPECTED_CODE with a checkpoint; its requeued
# run resumes from it and finishes.
sequence() {
  local signal="$1" target="$2" expected="$3"
  local name="$signal-$target"
  job="requeue-$name-$$-$RANDOM"
  ckpt="$out/ckpt-$name"
  echo "== the first run, stopped by SIG$signal to the $target"
  run "$name-first" 0
  for _ in $(seq 900); do
    [[ $(cat "$out/$name-first.txt" 2>/dev/null | wc -l) -ge 15 ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$out/$name-first.log"; echo "FAIL: the first run ended early"; exit 1; }
    sleep 0.1
  done
  local start=$SECONDS rank_signal
  if [[ "$target" == launcher ]]; then
    kill -"$signal" "$pid"
    rank_signal="User defined signal 2"  # the launcher asks the rank with SIGUSR2
  else
    kill -"$signal" "$(pgrep -P "$(cat "$STOKER_FAKE_OUT/srun.pid")" -x trainer)"
    rank_signal="User defined signal ${signal#USR}"
  fi
  set +e; wait "$pid"; local rc=$?; set -e
  local took=$((SECONDS - start))
  cat "$out/$name-first.log"
  echo "the first run exited with code $rc $took s after SIG$signal to the $target"
  [[ $rc -eq $expected ]] ||
    { echo "FAIL: expected $expected (stopped by SIG$signal with a checkpoint), got $rc"; exit 1; }
  [[ $took -le 60 ]] || { echo "FAIL: the stop took longer than --stop_grace"; exit 1; }
  if [[ "$target" == launcher ]]; then
    grep -q "caught signal [0-9]* (SIG$signal): asking the ranks to stop at the next step boundary with a checkpoint" "$out/$name-first.log" ||
      { echo "FAIL: the launcher did not ask the rank to stop"; exit 1; }
    grep -q "the ranks stopped after .*srun (pid [0-9]*) exited with code 140" "$out/$name-first.log" ||
      { echo "FAIL: the rank did not stop by itself within the grace"; exit 1; }
  fi
  stop_step=$(sed -n "s/.*stopped by $rank_signal at epoch [0-9]*, batch [0-9]* of [0-9]* (step \([0-9]*\)).*/\1/p" "$out/$name-first.log")
  [[ -n "$stop_step" ]] || { echo "FAIL: no stop step in the log"; exit 1; }
  local checkpoint
  checkpoint="$ckpt/$(printf 'ckpt-%012d.stoker' "$stop_step")"
  [[ -f "$checkpoint" ]] || { ls -l "$ckpt"; echo "FAIL: no checkpoint of step $stop_step"; exit 1; }
  assert_nothing_left "$job"

  echo "== the requeued run (SLURM_RESTART_COUNT=1)"
  run "$name-second" 1
  set +e; wait "$pid"; rc=$?; set -e
  cat "$out/$name-second.log"
  [[ $rc -eq 0 ]] || { echo "FAIL: the requeued run exited $rc"; exit 1; }
  grep -q "I SLURM_RESTART_COUNT=1: a requeued job; the trainers resume from the newest checkpoint" "$out/$name-second.log" ||
    { echo "FAIL: the launcher did not say it is a requeued job"; exit 1; }
  grep -q "resum.*$(basename "$checkpoint")" "$out/$name-second.log" ||
    { echo "FAIL: the requeued run did not resume from $(basename "$checkpoint")"; exit 1; }
  grep -q "training finished" "$out/$name-second.log" || { echo "FAIL: the requeued run did not finish"; exit 1; }
  # The requeued run's first loss is of the step after the checkpoint; together the runs
  # cover every step once.
  local first_steps second_steps total
  first_steps=$(wc -l < "$out/$name-first.txt")
  second_steps=$(wc -l < "$out/$name-second.txt")
  [[ $first_steps -eq $stop_step ]] || { echo "FAIL: the first run logged $first_steps steps, stopped at $stop_step"; exit 1; }
  total=$((2 * (samples / 32)))
  [[ $((first_steps + second_steps)) -eq $total ]] ||
    { echo "FAIL: the runs logged $first_steps + $second_steps steps, not $total"; exit 1; }
  assert_nothing_left "$job"
  echo "sequence: SIG$signal to the $target -> exit $expected, checkpoint of step $stop_step within $took s -> requeued run resumed and finished ($second_steps more steps)"
}

sequence TERM launcher 143
sequence USR1 launcher 138
sequence USR2 launcher 140
sequence USR1 rank 138
echo "PASS"
