#!/bin/sh
# A stand-in for mpirun in the launcher's lifecycle tests: `fake_mpirun -np N [-x NAME]...
# [--flag]... program args...` runs N copies of the program in the background with
# OMPI_COMM_WORLD_RANK set, waits for all of them, and exits with the first non-zero code.
# Like Open MPI it complains about -x names that are not set, and SIGUSR2 does not end it
# (the ranks, in its process group, get it too). Records $STOKER_FAKE_OUT/mpirun.pid and
# mpirun.args.
#
# With --srun_form first (fake_srun.sh runs it so) it stands in for srun instead:
# `--ntasks=N [--name=value]... program args...`, SLURM_PROCID set as well, recording
# srun.pid and srun.args.
out="${STOKER_FAKE_OUT:?STOKER_FAKE_OUT must be set}"
launcher=mpirun
if [ "${1:-}" = --srun_form ]; then
  launcher=srun
  shift
fi
echo $$ > "$out/$launcher.pid"
printf '%s\n' "$@" > "$out/$launcher.args"
np=""
if [ "$launcher" = srun ]; then
  while [ $# -gt 0 ]; do
    case "$1" in
      --ntasks=*) np="${1#--ntasks=}"; shift ;;
      --*=*) shift ;;
      -*) echo "fake srun: options take the --name=value form here ('$1')" >&2; exit 96 ;;
      *) break ;;
    esac
  done
  [ -n "$np" ] || { echo "fake srun: no --ntasks" >&2; exit 97; }
else
  while [ $# -gt 0 ]; do
    case "$1" in
      -np) np="$2"; shift 2 ;;
      -x)
        case "$2" in *[!A-Za-z0-9_]*|"") echo "fake mpirun: bad -x '$2'" >&2; exit 98 ;; esac
        if eval "[ -z \"\${$2+set}\" ]"; then
          echo "fake mpirun: -x $2: variable not set" >&2
          exit 98
        fi
        shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  [ -n "$np" ] || { echo "fake mpirun: no -np" >&2; exit 97; }
fi
trap : USR2
pids=""
rank=0
while [ "$rank" -lt "$np" ]; do
  [ "$launcher" = mpirun ] || export SLURM_PROCID=$rank
  OMPI_COMM_WORLD_RANK=$rank "$@" &
  pids="$pids $!"
  rank=$((rank + 1))
done
code=0
for pid in $pids; do
  while :; do
    wait "$pid"
    status=$?
    # A trapped signal ends `wait` early; the rank may still run (or be a zombie).
    if [ "$status" -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi
    break
  done
  [ "$code" -ne 0 ] || code=$status
done
exit "$code"
