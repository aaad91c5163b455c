# Environment for running Open MPI in tests and scripts (sourced): allowed as root (CI runs
# as root), oversubscription allowed (CI has 2 cores), shared memory without ptrace-based
# single copy (refused in containers), loopback-only TCP, and NCCL without NVLink
# multicast (see the GPU hosts' notes); and private_mpi_session_dir for tests.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo
export NCCL_NVLS_ENABLE=0

# private_mpi_session_dir: gives this test's mpirun a session directory and shared-memory
# files of its own, removed on exit. Open MPI names both after the job id, a hash of the host
# name and mpirun's pid; tests that run at the same time in pid namespaces of their own
# (Bazel's sandbox) can get the same pid and so share them: MPI_Init then fails ("getting
# local rank failed") or the shared-memory transport crashes or hangs. Under /tmp, not
# TEST_TMPDIR: PMIx puts Unix sockets in the session directory, whose paths must stay short.
private_mpi_session_dir() {
  STOKER_TEST_OMPI_DIR=$(mktemp -d /tmp/stoker-test-ompi.XXXXXX)
  export OMPI_MCA_orte_tmpdir_base="$STOKER_TEST_OMPI_DIR"
  export OMPI_MCA_btl_vader_backing_directory="$STOKER_TEST_OMPI_DIR"
  trap 'rm -rf "$STOKER_TEST_OMPI_DIR"' EXIT
}
