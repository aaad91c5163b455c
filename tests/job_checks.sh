# What the cross-program tests share (sourced): their set-up, a private mount namespace, the
# check that a job left nothing behind, the pids of a job's processes, long training jobs
# (through the launcher or a bare mpirun) and waiting for their training to start, a short
# two-rank launcher job, the stalled-rank fault (SIGSTOP of a
# rank, then the collective watchdogs' report), the first error line of a job's output, the
# check that a job's loss fell, and the check that a job left no GPU memory held.
# A test starts with
#
#   set -euo pipefail
#   source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
#   begin_job_test
#
# Sourcing sets $root, the runfiles tree that holds the programs and scripts.
root="${TEST_SRCDIR}/stoker"

# begin_job_test [JOB_PREFIX]: Open MPI's environment for tests (mpi_env.sh) with a session
# directory of this test's own (private_mpi_session_dir, removed on exit); sets out (the
# test's scratch folder) and python (the python with torch), and with JOB_PREFIX job, a job
# id of this run's own (PREFIX-PID-RANDOM).
begin_job_test() {
  source "$root/tests/mpi_env.sh"
  private_mpi_session_dir
  out="${TEST_TMPDIR:-$(mktemp -d)}"
  python="$(stoker_python)"
  if [[ $# -gt 0 ]]; then job="$1-$$-$RANDOM"; fi
}

# assert_nothing_left JOB_ID [PID...]: no /dev/shm/stoker.JOB_ID.* segment, no
# /tmp/stoker.JOB_ID (the job directory, with the sockets) or /tmp/stoker.JOB_ID.* (the owner
# record), no process whose
# command line names the job, and none of the given pids alive.
assert_nothing_left() {
  local job="$1"; shift
  local leftover_shm leftover_tmp leftover_procs pid
  leftover_shm=$(ls /dev/shm | grep -F "stoker.$job." || true)
  [[ -z "$leftover_shm" ]] || { echo "FAIL: segments left: $leftover_shm"; return 1; }
  leftover_tmp=$(ls -d "/tmp/stoker.$job" /tmp/stoker."$job".* 2>/dev/null || true)
  [[ -z "$leftover_tmp" ]] || { echo "FAIL: left in /tmp: $leftover_tmp"; return 1; }
  sleep 0.5
  leftover_procs=$(pgrep -af -- "$job" | grep -v pgrep || true)
  [[ -z "$leftover_procs" ]] || { echo "FAIL: processes left: $leftover_procs"; return 1; }
  for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then echo "FAIL: process $pid left"; return 1; fi
  done
  echo "nothing of job $job left behind"
}

# The python with torch: $STOKER_PYTHON, else python3.
stoker_python() {
  echo "${STOKER_PYTHON:-python3}"
}

# make_jpeg_classes DIR SIDE LEVELS COUNT_A COUNT_B: an image folder of two classes, a and
# b, of COUNT_A and COUNT_B baseline JPEGs (SIDE x SIDE, quality 90): noise in [0, LEVELS)
# with the class's own channel raised by 150, from a fixed seed.
make_jpeg_classes() {
  "$python" - "$@" <<'PY'
import os, sys
import numpy as np
from PIL import Image
root, side, levels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
counts = [int(sys.argv[4]), int(sys.argv[5])]
rng = np.random.default_rng(0)
for c, name in enumerate(["a", "b"]):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(counts[c]):
        pixels = rng.integers(0, levels, (side, side, 3), dtype=np.uint8)
        pixels[..., c] += 150
        Image.fromarray(pixels).save(os.path.join(root, name, f"{i:04d}.jpg"), quality=90)
PY
}

# in_private_mount_namespace SCRIPT [ARGS...]: unless ARGS start with --inside, runs SCRIPT
# again (exec) in a mount namespace of its own, as root or else as root of a user namespace,
# with --inside first; mounts made there vanish with it and never reach the host. Fails when
# neither is allowed.
in_private_mount_namespace() {
  local script="$1"; shift
  [[ "${1:-}" == "--inside" ]] && return 0
  if unshare -m --propagation private true 2>/dev/null; then
    exec unshare -m --propagation private bash "$script" --inside "$@"
  elif unshare -rm --propagation private true 2>/dev/null; then
    exec unshare -rm --propagation private bash "$script" --inside "$@"
  fi
  echo "FAIL: no private mount namespace (unshare -m and unshare -rm are both refused)"
  exit 1
}

# pid_records LOG KEY=VALUE...: the pids of LOG's pid records whose fields include every
# KEY=VALUE given, one a line, in the order logged. A pid record is a log line whose message
# is `pid_record` and then space-separated KEY=VALUE fields, pid= among them; the data
# service writes one when a rank registers a ring (role=rank rank=R world_size=W
# split=training|validation pid=P), and a rank that starts its node's data service writes
# one once the service is ready (role=data_service node=N pid=P socket=PATH).
pid_records() {
  local log="$1"; shift
  awk -v wanted="$*" '
    {
      at = index($0, "pid_record ")
      if (at == 0) next
      n = split(substr($0, at + 11), fields, " ")
      split("", value)
      for (i = 1; i <= n; i++) {
        eq = index(fields[i], "=")
        if (eq > 0) value[substr(fields[i], 1, eq - 1)] = substr(fields[i], eq + 1)
      }
      m = split(wanted, want, " ")
      for (i = 1; i <= m; i++) {
        eq = index(want[i], "=")
        if (value[substr(want[i], 1, eq - 1)] != substr(want[i], eq + 1)) next
      }
      print value["pid"]
    }' "$log"
}

# launch_training_job NAME [TRAINER FLAGS...]: starts, in the background through the
# launcher, a 2-rank job that trains the small CNN on the synthetic dataset until stopped (a
# loss line a step), and waits until it trains; sets job, log (OUT/NAME.log; rank 0's losses
# in LOG.loss) and launcher_pid. The launcher is SIGKILLed after 180 s.
launch_training_job() {
  job="$1-$$-$RANDOM"
  log="$out/$1.log"
  timeout --signal=KILL 180 "$root/launcher/launcher" --np=2 --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples=4096 --synthetic_classes=4 --data_threads=1 -- \
    --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=1000 \
    --log_every=1 --loss_log="$log.loss" "${@:2}" > "$log" 2>&1 &
  launcher_pid=$!
  await_training "$log" "$launcher_pid"
}

# launch_bare_training_job NAME TIMEOUT_S SAMPLES TENTHS [TRAINER FLAGS...]: starts, in the
# background, a 2-rank `mpirun trainer` job (no launcher: local rank 0 starts the node's data
# service, on SAMPLES synthetic samples) that trains the small CNN until stopped (a loss line
# a step), and waits until it trains (await_training with TENTHS); sets job, log (OUT/NAME.log;
# rank 0's losses in LOG.loss), mpirun_pid and service_pid. mpirun is SIGKILLed after
# TIMEOUT_S seconds.
launch_bare_training_job() {
  local timeout_s="$2" samples="$3" tenths="$4"
  job="$1-$$-$RANDOM"
  log="$out/$1.log"
  shift 4
  timeout --signal=KILL "$timeout_s" mpirun -np 2 "$root/trainer/trainer" --job_id="$job" \
    --data_service="$root/data_service/data_service" \
    --data_service_args="--dataset=synthetic --synthetic_samples=$samples --synthetic_classes=4 --threads=1" \
    --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=1000 \
    --log_every=1 --loss_log="$log.loss" "$@" > "$log" 2>&1 &
  mpirun_pid=$!
  await_training "$log" "$mpirun_pid" "$tenths"
  service_pid=$(pid_records "$log" role=data_service node=0 | head -n 1)
}

# await_training LOG PID [TENTHS]: waits (at most TENTHS tenths of a second, 900 by default)
# until LOG.loss, rank 0's --loss_log, has two steps. Fails, printing LOG, when PID (the job)
# ends first or training does not start in time (then PID gets SIGTERM).
await_training() {
  local log="$1" pid="$2" tenths="${3:-900}"
  for _ in $(seq "$tenths"); do
    [[ -f "$log.loss" && $(wc -l < "$log.loss") -ge 2 ]] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "FAIL: the job ended early"; exit 1; }
    sleep 0.1
  done
  [[ -f "$log.loss" && $(wc -l < "$log.loss") -ge 2 ]] ||
    { kill -TERM "$pid"; cat "$log"; echo "FAIL: training did not start"; exit 1; }
}

# first_error_line LOG: the first line of LOG that a program logged at the error level
# ("[trainer rank 1 12:00:01.234] E ..."), or a usage error's "<program>: ..." line, whichever
# comes first; empty when there is none. The exit-code table (common/exit_codes.h) promises
# that it names the cause and the rank or file.
first_error_line() {
  grep -m 1 -E '^\[[^]]*\] E |^(launcher|trainer|data_service): ' "$1" || true
}

# expect_exit LOG CODE ACTUAL PATTERN: ACTUAL (a job's exit code) is CODE, and the first error
# line of LOG matches PATTERN (grep -E); else prints LOG and a FAIL line and returns 1.
expect_exit() {
  local log="$1" want="$2" got="$3" pattern="$4" line
  [[ "$got" -eq "$want" ]] || { cat "$log"; echo "FAIL: exit code $got, expected $want"; return 1; }
  line=$(first_error_line "$log")
  grep -qE -- "$pattern" <<< "$line" ||
    { cat "$log"; echo "FAIL: the first error line '$line' does not match '$pattern'"; return 1; }
  echo "exit $got; first error line: $line"
}

# expect_loss_falls LOSS_FILE STEPS FACTOR: LOSS_FILE (a --loss_log: the loss is the third
# field) has STEPS lines, and the mean loss of its last 4 steps is below FACTOR times that of
# its first 4; else a FAIL line and returns 1.
expect_loss_falls() {
  local file="$1" want="$2" factor="$3" steps first last
  steps=$(wc -l < "$file")
  [[ "$steps" -eq "$want" ]] || { echo "FAIL: expected $want logged steps, got $steps"; return 1; }
  first=$(head -n 4 "$file" | awk '{s += $3} END {print s / NR}')
  last=$(tail -n 4 "$file" | awk '{s += $3} END {print s / NR}')
  echo "mean loss of the first 4 steps $first, of the last 4 steps $last"
  awk -v a="$first" -v b="$last" -v f="$factor" 'BEGIN {exit !(b < f * a)}' ||
    { echo "FAIL: the loss did not fall by $(awk -v f="$factor" 'BEGIN {print (1 - f) * 100}')%"; return 1; }
}

# run_synthetic_job NP JOB_ID SAMPLES CLASSES [TRAINER FLAGS...]: the launcher as job JOB_ID,
# with NP ranks of the trainer on the data service's synthetic dataset of SAMPLES samples in
# CLASSES classes (one decode thread); the trainer's --num_classes is CLASSES.
run_synthetic_job() {
  local np="$1" job_id="$2" samples="$3" classes="$4"; shift 4
  "$root/launcher/launcher" --np="$np" --job_id="$job_id" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples="$samples" --synthetic_classes="$classes" \
    --data_threads=1 -- --num_classes="$classes" "$@"
}

# run_launcher_job TIMEOUT_S PREFIX NAME [LAUNCHER FLAGS...] [-- TRAINER FLAGS...]: a
# two-rank launcher job of the trainer and the data service (job id PREFIX-NAME-...), sent
# SIGTERM after TIMEOUT_S seconds (0: never), with its output in $out/NAME.log; sets rc to its
# exit code and checks that it left nothing behind.
run_launcher_job() {
  local timeout_s="$1" job="$2-$3-$$-$RANDOM" name="$3"; shift 3
  set +e
  timeout "$timeout_s" "$root/launcher/launcher" --np=2 --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    "$@" > "$out/$name.log" 2>&1
  rc=$?
  set -e
  assert_nothing_left "$job"
}

# run_small_job PREFIX NAME [TRAINER FLAGS...]: run_launcher_job (at most 300 s) of the small
# CNN on 1024 synthetic samples, batch 32: 16 steps per epoch, one epoch.
run_small_job() {
  local prefix="$1" name="$2"; shift 2
  run_launcher_job 300 "$prefix" "$name" \
    --dataset=synthetic --synthetic_samples=1024 --synthetic_classes=4 --data_threads=1 -- \
    --model=small_cnn --num_classes=4 --image_size=32 --batch_size=32 --epochs=1 --lr=0.05 \
    --log_every=4 "$@"
}

# expect_resumed_at_step_8 NAME WHAT: the run_small_job run NAME resumed from the checkpoint
# of step 8 (its log OUT/NAME.log says so), and its losses (OUT/NAME.txt) after step 8 are
# the uninterrupted run's (OUT/full.txt). WHAT names the resumption in the FAIL lines (e.g.
# "the fall-back"); on failure exits 1.
expect_resumed_at_step_8() {
  local name="$1" what="$2"
  grep -q "resuming from .*ckpt-000000000008.stoker: epoch 1, batch 8, step 8" "$out/$name.log" ||
    { grep -i resum "$out/$name.log"; echo "FAIL: $what is not from step 8"; exit 1; }
  head -n 8 "$out/full.txt" | cat - "$out/$name.txt" | cmp - "$out/full.txt" ||
    { echo "FAIL: the losses after $what differ from the uninterrupted run's"; exit 1; }
}

# stall_rank LOG LOSS_FILE MIN_STEPS NP RANK TIMEOUT_S -- COMMAND...: runs COMMAND (a job of
# NP ranks, under the launcher or a bare mpirun, whose rank 0 writes --loss_log=LOSS_FILE and
# whose watchdogs have --collective_timeout_s=TIMEOUT_S) in the background, its output in
# LOG. Once LOSS_FILE has MIN_STEPS lines (training is under way; at most 120 s), it sends
# SIGSTOP to rank RANK (its pid from the data service's pid record for that rank's training
# ring) and waits for COMMAND, which must exit non-zero, not before the collective timeout
# and within TIMEOUT_S + 10 s of the SIGSTOP. Sets stall_code (COMMAND's exit code), stalled_pid (the
# stopped rank's pid) and rank_pids (every rank's, one space after each). On failure prints
# LOG and a FAIL line and returns 1.
stall_rank() {
  local log="$1" loss="$2" min_steps="$3" np="$4" rank="$5" timeout_s="$6"
  shift 6
  [[ "${1:-}" == "--" ]] || { echo "FAIL: stall_rank: expected -- before the command"; return 1; }
  shift
  "$@" > "$log" 2>&1 &
  local job_pid=$! started=0 start code=0 elapsed
  for _ in $(seq 1200); do
    if [[ -f "$loss" && $(wc -l < "$loss") -ge "$min_steps" ]]; then started=1; break; fi
    kill -0 "$job_pid" 2>/dev/null || { cat "$log"; echo "FAIL: the job ended early"; return 1; }
    sleep 0.1
  done
  if [[ "$started" -eq 0 ]]; then
    kill -TERM "$job_pid"; wait "$job_pid" || true
    cat "$log"; echo "FAIL: training did not start"; return 1
  fi
  stalled_pid=$(pid_records "$log" role=rank rank="$rank" world_size="$np" split=training | head -n 1)
  rank_pids=$(pid_records "$log" role=rank world_size="$np" split=training | sort -u | tr '\n' ' ')
  if [[ -z "$stalled_pid" ]]; then
    kill -TERM "$job_pid"; wait "$job_pid" || true
    cat "$log"; echo "FAIL: no pid for rank $rank in the data service's log"; return 1
  fi
  echo "stopping rank $rank (pid $stalled_pid); ranks: $rank_pids"
  kill -STOP "$stalled_pid"
  start=$SECONDS
  wait "$job_pid" || code=$?
  stall_code=$code
  elapsed=$((SECONDS - start))
  echo "the job exited with code $code $elapsed s after the SIGSTOP"
  [[ "$code" -ne 0 ]] || { cat "$log"; echo "FAIL: the job exited 0"; return 1; }
  [[ "$elapsed" -le $((timeout_s + 10)) ]] ||
    { cat "$log"; echo "FAIL: the job took more than $((timeout_s + 10)) s (the collective timeout + 10 s) to end"; return 1; }
  [[ "$elapsed" -ge $((timeout_s - 1)) ]] ||
    { cat "$log"; echo "FAIL: the job ended before the collective timeout ($timeout_s s)"; return 1; }
}

# stall_launcher_job LOG LOSS_FILE MIN_STEPS NP RANK KILL_AFTER_S [LAUNCHER FLAGS...] --
# [TRAINER FLAGS...]: stall_rank of job $job through the launcher, NP ranks (SIGKILLed after
# KILL_AFTER_S seconds), a loss line a step in LOSS_FILE, whose watchdogs time a collective
# out after 10 s (data after 9 s) and give an abort 5 s.
stall_launcher_job() {
  local log="$1" loss="$2" min_steps="$3" np="$4" rank="$5" kill_after_s="$6"
  shift 6
  stall_rank "$log" "$loss" "$min_steps" "$np" "$rank" 10 -- \
    timeout --signal=KILL "$kill_after_s" "$root/launcher/launcher" --np="$np" --job_id="$job" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    "$@" --log_every=1 --loss_log="$loss" --collective_timeout_s=10 --data_timeout_s=9 \
    --collective_abort_grace_s=5
}

# check_stall_report LOG PATTERN RANK NODE NODE_RANK...: the first line of LOG that matches
# PATTERN (a grep basic regular expression) is a watchdog's report, which must name rank
# RANK (pid $stalled_pid, from stall_rank) as stalled and give the last collective (an
# allreduce) that each NODE_RANK of node NODE completed. Sets report. On failure prints LOG
# and a FAIL line and returns 1.
check_stall_report() {
  local log="$1" pattern="$2" rank="$3" node="$4"
  shift 4
  local completed="Last collective each rank of node $node completed: " sep="" r
  for r in "$@"; do
    completed="$completed${sep}rank $r #[0-9]* (allreduce)"
    sep=".*; "
  done
  report=$(grep "$pattern" "$log" | head -n 1 || true)
  [[ -n "$report" ]] || { cat "$log"; echo "FAIL: no watchdog report matching: $pattern"; return 1; }
  echo "$report"
  grep -q "rank $rank (pid $stalled_pid): stalled: no heartbeat for" <<< "$report" ||
    { cat "$log"; echo "FAIL: the report does not name rank $rank as stalled"; return 1; }
  grep -q "$completed" <<< "$report" ||
    { cat "$log"; echo "FAIL: the report does not give each rank's last collective"; return 1; }
}

# gpu_memory_used: the memory in use on each visible GPU, in MiB, space-separated (nvidia-smi).
gpu_memory_used() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr -d ' ' | paste -sd' '
}

# assert_gpu_memory_released BEFORE: within 10 s, every GPU's memory in use is back to
# within 64 MiB of BEFORE (gpu_memory_used taken before the job started): a failed job
# holds no GPU memory once it has ended. Prints the compute processes nvidia-smi still
# lists; on failure a FAIL line and returns 1.
assert_gpu_memory_released() {
  local before=($1) now held i start=$SECONDS
  while true; do
    now=($(gpu_memory_used))
    held=""
    for i in "${!before[@]}"; do
      (( ${now[i]:-0} <= ${before[i]} + 64 )) || held="$held GPU $i: ${now[i]} MiB (before the job ${before[i]} MiB);"
    done
    [[ -z "$held" ]] && break
    if (( SECONDS - start >= 10 )); then
      nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv || true
      echo "FAIL: GPU memory still held 10 s after the job ended:$held"
      return 1
    fi
    sleep 0.5
  done
  echo "GPU memory released: ${now[*]} MiB in use (before the job ${before[*]} MiB) after $((SECONDS - start)) s;" \
    "compute processes: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | paste -sd';' || true)"
}
