#!/usr/bin/env bash
# Runs a googletest binary as N MPI ranks: run_mpi_test.sh N BINARY [ARGS...].
# The test (not the user's shell) sets what Open MPI needs as root and in containers.
set -euo pipefail
np="$1"; shift
binary="$1"; shift
source "${TEST_SRCDIR}/stoker/tests/mpi_env.sh"
exec timeout --signal=KILL 600 mpirun -np "$np" "$binary" "$@"
