#!/bin/sh
# A stand-in for srun in the launcher's lifecycle tests: `fake_srun --ntasks=N [--flag]...
# program args...` runs N copies of the program in the background with SLURM_PROCID and
# OMPI_COMM_WORLD_RANK set, waits for all of them, and exits with the first non-zero code.
# Records $STOKER_FAKE_OUT/srun.pid and srun.args. It is fake_mpirun.sh (beside it in the
# runfiles) in its srun form, in this same process.
exec "$(dirname "$0")/fake_mpirun.sh" --srun_form "$@"
