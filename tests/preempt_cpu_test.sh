#!/usr/bin/env bash
# Preemption: SIGTERM to the launcher (what a scheduler sends) stops every rank after the
# same step with a checkpoint before anything is killed (the launcher asks the ranks to stop
# with SIGUSR2 through mpirun and waits up to --stop_grace), and the job exits 143; a second
# run with --resume=auto (the default) continues from it, and the losses of both runs are
# bit-identical to those of an uninterrupted run. SIGUSR1 to the launcher (Slurm's warning
# before the time limit, --signal=B:USR1@N) does the same, and the job exits 138. SIGUSR2 to
# mpirun (which forwards it to the ranks at once) does the same without anything being
# killed: the job exits 140. Nothing is left behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

launch() {  # launch NAME JOB [trainer flags...]: starts the job in the background; $pid
  local name="$1" job="$2"; shift 2
  "$root/launcher/launcher" --np=2 --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples=1500 --synthetic_classes=4 --data_threads=1 -- \
    --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --epochs=3 --lr=0.05 \
    --log_every=5 --loss_log="$out/$name.txt" "$@" > "$out/$name.log" 2>&1 &
  pid=$!
}

wait_for_lines() {  # wait_for_lines FILE N: until FILE has N lines (60 s at most)
  for _ in $(seq 600); do
    [[ $(cat "$1" 2>/dev/null | wc -l) -ge $2 ]] && return 0
    sleep 0.1
  done
  echo "FAIL: $1 never reached $2 lines"; exit 1
}

# Every line of the runs' loss logs is the reference's, and together they cover it.
same_losses() {
  local reference="$1"; shift
  awk 'NR==FNR {ref[$1" "$2]=$3; next} {seen[$1" "$2]=1; if (ref[$1" "$2] != $3) {print "differs:", $0; bad=1}}
       END {for (k in ref) if (!seen[k]) {print "missing:", k; bad=1}; exit bad}' "$reference" "$@" ||
    { echo "FAIL: the interrupted and resumed runs' losses are not the reference's"; exit 1; }
  echo "losses of $(basename -a "$@" | tr "\n" " ")are bit-identical to $(basename "$reference")"
}

job="preempt-ref-$$-$RANDOM"
launch reference "$job"
wait "$pid" || { cat "$out/reference.log"; echo "FAIL: the reference run failed"; exit 1; }
assert_nothing_left "$job"

# stop_by_launcher_signal NAME SIGNAL NUMBER CODE: starts run NAME (checkpoints in
# OUT/ckpt_NAME), sends SIGNAL (signal NUMBER) to the launcher once training is under way, and
# checks that the launcher asked the ranks to stop, that they stopped by themselves within the
# grace with a checkpoint of the step they stopped after, that the job exited CODE and that
# nothing is left; sets stop_step.
stop_by_launcher_signal() {
  local name="$1" signal="$2" number="$3" code="$4"
  job="preempt-$name-$$-$RANDOM"
  launch "$name" "$job" --checkpoint_dir="$out/ckpt_$name"
  wait_for_lines "$out/$name.txt" 20
  kill -"$signal" "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  [[ $rc -eq $code ]] || { cat "$out/$name.log"; echo "FAIL: the launcher exited $rc after SIG$signal, expected $code"; exit 1; }
  grep -q "caught signal $number (SIG$signal): asking the ranks to stop at the next step boundary with a checkpoint (signal 12 (SIGUSR2) to mpirun" "$out/$name.log" ||
    { cat "$out/$name.log"; echo "FAIL: the launcher did not ask the ranks to stop"; exit 1; }
  grep -q "I the ranks stopped after .*: mpirun (pid [0-9]*) exited with code 140" "$out/$name.log" ||
    { cat "$out/$name.log"; echo "FAIL: the ranks did not stop by themselves within the grace"; exit 1; }
  grep -q "stopped by User defined signal 2 at epoch" "$out/$name.log" || { cat "$out/$name.log"; echo "FAIL: the ranks did not stop"; exit 1; }
  stop_step=$(sed -n 's/.*stopped by User defined signal 2 at epoch [0-9]*, batch [0-9]* of [0-9]* (step \([0-9]*\)).*/\1/p' "$out/$name.log")
  [[ -n "$stop_step" ]] || { cat "$out/$name.log"; echo "FAIL: the ranks did not stop"; exit 1; }
  [[ -f "$out/ckpt_$name/$(printf 'ckpt-%012d.stoker' "$stop_step")" ]] || { ls -l "$out/ckpt_$name"; echo "FAIL: no checkpoint of step $stop_step"; exit 1; }
  assert_nothing_left "$job"
}

# resume_after NAME [STEP]: run NAME_resumed continues from OUT/ckpt_NAME (from the checkpoint
# of step STEP where given) and leaves nothing; NAME's losses and its own are the reference's.
resume_after() {
  local name="$1" step="${2:-}"
  job="preempt-$name-resume-$$-$RANDOM"
  launch "${name}_resumed" "$job" --checkpoint_dir="$out/ckpt_$name"
  wait "$pid" || { cat "$out/${name}_resumed.log"; echo "FAIL: the resumed run failed"; exit 1; }
  if [[ -n "$step" ]]; then
    grep -q "resuming from .*$(printf 'ckpt-%012d' "$step")" "$out/${name}_resumed.log" || { echo "FAIL: did not resume from step $step"; exit 1; }
  fi
  assert_nothing_left "$job"
  same_losses "$out/reference.txt" "$out/$name.txt" "$out/${name}_resumed.txt"
}

# SIGTERM to the launcher.
stop_by_launcher_signal term TERM 15 143
resume_after term "$stop_step"

# SIGUSR1 to the launcher: the same stop as SIGTERM's, exit 138.
stop_by_launcher_signal usr1 USR1 10 138
resume_after usr1 "$stop_step"

# SIGUSR2 to mpirun: forwarded to the ranks at once; they stop, checkpoint and exit 140.
job="preempt-usr2-$$-$RANDOM"
launch usr2 "$job" --checkpoint_dir="$out/ckpt_usr2"
wait_for_lines "$out/usr2.txt" 20
mpirun_pid=$(pgrep -P "$pid" -x mpirun)
kill -USR2 "$mpirun_pid"
set +e; wait "$pid"; rc=$?; set -e
[[ $rc -eq 140 ]] || { cat "$out/usr2.log"; echo "FAIL: the job exited $rc after SIGUSR2, expected 140"; exit 1; }
grep -q "stopped by User defined signal 2" "$out/usr2.log" || { echo "FAIL: no graceful stop"; exit 1; }
! grep -q "killed [0-9]* process" "$out/usr2.log" || { echo "FAIL: processes had to be killed"; exit 1; }
assert_nothing_left "$job"
resume_after usr2
echo "PASS"
