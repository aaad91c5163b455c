# Checks shared by the cross-program tests (sourced): that a job left nothing behind.
# assert_nothing_left JOB_ID [PID...]: no /dev/shm/stoker.JOB_ID.* segment, no
# /tmp/stoker.JOB_ID (directory) or /tmp/stoker.JOB_ID.* (node sockets), no process whose
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
