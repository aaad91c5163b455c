# Helpers shared by the cross-program tests (sourced): a private Open MPI session directory,
# and the check that a job left nothing behind.
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

# Gives this test's mpirun a session directory and shared-memory files of its own, removed
# on exit. Open MPI names both after the job id, a hash of the host name and mpirun's pid;
# tests that run at the same time in pid namespaces of their own (Bazel's sandbox) can get
# the same pid and so share them: MPI_Init then fails ("getting local rank failed") or the
# shared-memory transport crashes or hangs. Under /tmp, not TEST_TMPDIR: PMIx puts Unix
# sockets in the session directory, whose paths must stay short.
private_mpi_session_dir() {
  STOKER_TEST_OMPI_DIR=$(mktemp -d /tmp/stoker-test-ompi.XXXXXX)
  export OMPI_MCA_orte_tmpdir_base="$STOKER_TEST_OMPI_DIR"
  export OMPI_MCA_btl_vader_backing_directory="$STOKER_TEST_OMPI_DIR"
  trap 'rm -rf "$STOKER_TEST_OMPI_DIR"' EXIT
}
