#!/usr/bin/env bash
# Runs a googletest binary as N MPI ranks: run_mpi_test.sh N BINARY [ARGS...].
# The test (not the user's shell) sets what Open MPI needs as root and in containers, and
# gives this mpirun a session directory and shared-memory files of its own: mpiruns that
# Bazel starts at the same moment in its sandboxes can get the same Open MPI job id.
set -uo pipefail
np="$1"; shift
binary="$1"; shift
source "${TEST_SRCDIR}/stoker/tests/mpi_env.sh"
private_mpi_session_dir
timeout --signal=KILL 600 mpirun -np "$np" "$binary" "$@"
