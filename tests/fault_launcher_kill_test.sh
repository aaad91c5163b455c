#!/usr/bin/env bash
# kill -9 of the launcher (process faults):
#  1. mid-epoch: its children die with it (PR_SET_PDEATHSIG): mpirun by SIGKILL and the ranks
#     after it, the data service by SIGTERM, on which it removes its socket and segments.
#     Bound: no process of the job is left 10 s after the kill. What the launcher itself
#     would have removed (the job directory, its owner record) stays until the next
#     launcher on the machine, which removes it with a log line and runs its own job.
#  2. the launcher and its data service killed together (as an OOM kill may): the data
#     service's segments stay too; a new job with the same job id removes them and starts.
# Afterwards nothing of any of these jobs is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
launcher_pid=""
trap 'if [[ -n "$launcher_pid" ]]; then kill -TERM "$launcher_pid" 2>/dev/null || true; fi; rm -rf "$STOKER_TEST_OMPI_DIR"' EXIT

# launch JOB LOG EPOCHS: starts a 2-rank job in the background; sets launcher_pid (the
# launcher itself, not a wrapper: the test kills it).
launch() {
  "$root/launcher/launcher" --np=2 --job_id="$1" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples=512 --synthetic_classes=4 --data_threads=1 -- \
    --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs="$3" \
    --log_every=1 --loss_log="$2.loss" > "$2" 2>&1 &
  launcher_pid=$!
}

# clean_up_after JOB LOG WHAT DEAD PATTERN MISSING: runs JOB (one epoch, logging to LOG),
# which must succeed ("FAIL: WHAT exited ..."), and log a line matching PATTERN ("FAIL:
# MISSING"); prints its lines about the dead job DEAD.
clean_up_after() {
  local job="$1" log="$2" what="$3" dead="$4" pattern="$5" missing="$6"
  launch "$job" "$log" 1
  local code=0
  wait "$launcher_pid" || code=$?
  [[ "$code" -eq 0 ]] || { cat "$log"; echo "FAIL: $what exited $code"; exit 1; }
  grep -q "$pattern" "$log" || { cat "$log"; echo "FAIL: $missing"; exit 1; }
  grep "of the dead job $dead" "$log"
}

# under_way LOG: waits until rank 0 logged two steps; sets service_pid, mpirun_pid, rank_pids.
under_way() {
  await_training "$1" "$launcher_pid"
  service_pid=$(pgrep -P "$launcher_pid" -f "data_service/data_service" | head -n 1)
  mpirun_pid=$(pgrep -P "$launcher_pid" | grep -vx "$service_pid" | head -n 1)
  rank_pids=$(pid_records "$1" role=rank world_size=2 split=training | sort -u | tr '\n' ' ')
  [[ -n "$service_pid" && -n "$mpirun_pid" && -n "$rank_pids" ]] || { kill -TERM "$launcher_pid"; cat "$1"; echo "FAIL: pids not found"; exit 1; }
  echo "launcher $launcher_pid, data service $service_pid, mpirun $mpirun_pid, ranks $rank_pids"
}

# all_gone LIMIT PID...: every PID has exited within LIMIT seconds.
all_gone() {
  local limit="$1" start=$SECONDS pid alive; shift
  while true; do
    alive=""
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
    [[ -z "$alive" ]] && break
    [[ $((SECONDS - start)) -lt "$limit" ]] || { ps -o pid,stat,args -p "${alive// /,}" || true; echo "FAIL: still running after $limit s:$alive"; exit 1; }
    sleep 0.2
  done
  echo "every process of the job ended $((SECONDS - start)) s after the kill"
}

echo "== 1: kill -9 of the launcher"
dead="launcher-killed-$$-$RANDOM"
launch "$dead" "$out/dead.log" 1000
under_way "$out/dead.log"
kill -KILL "$launcher_pid"
wait "$launcher_pid" 2>/dev/null || true
# shellcheck disable=SC2086
all_gone 10 "$service_pid" "$mpirun_pid" $rank_pids
sleep 0.5
leftover_procs=$(pgrep -af -- "$dead" | grep -v pgrep || true)
[[ -z "$leftover_procs" ]] || { echo "FAIL: processes left: $leftover_procs"; exit 1; }
[[ -z "$(ls /dev/shm | grep -F "stoker.$dead." || true)" ]] ||
  { ls -l /dev/shm; echo "FAIL: the data service did not remove its segments on SIGTERM"; exit 1; }
[[ -f "/tmp/stoker.$dead.owner" ]] || { echo "FAIL: no owner record of the killed launcher"; exit 1; }
echo "left by the killed launcher: $(ls -d /tmp/stoker."$dead"* | tr '\n' ' ')"

next="after-kill-$$-$RANDOM"
clean_up_after "$next" "$out/next.log" "the next job" "$dead" \
  "removed /tmp/stoker.$dead.owner of the dead job $dead (its owner, pid [0-9]*, is gone)" \
  "the next job did not remove the dead job's files"
assert_nothing_left "$dead"
assert_nothing_left "$next"
[[ ! -e "/tmp/stoker.$dead.owner" && ! -e "/tmp/stoker.$next.owner" ]] || { echo "FAIL: owner records left"; exit 1; }

echo "== 2: the launcher and its data service killed together; the same job id again"
job="killed-together-$$-$RANDOM"
launch "$job" "$out/together.log" 1000
under_way "$out/together.log"
kill -KILL "$launcher_pid" "$service_pid"
wait "$launcher_pid" 2>/dev/null || true
# shellcheck disable=SC2086
all_gone 10 "$service_pid" "$mpirun_pid" $rank_pids
segments=$(ls /dev/shm | grep -F "stoker.$job." || true)
[[ -n "$segments" ]] || { echo "FAIL: expected the killed data service's segments to be left"; exit 1; }
echo "left: $segments"
clean_up_after "$job" "$out/again.log" "the job with the same id" "$job" \
  "removed /dev/shm/stoker.$job.ring.0 of the dead job $job" \
  "the stale segments were not removed with a log line"
assert_nothing_left "$job"
[[ ! -e "/tmp/stoker.$job.owner" ]] || { echo "FAIL: owner record left"; exit 1; }
echo "PASS"
