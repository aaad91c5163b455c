#!/bin/sh
# A stand-in for srun in the launcher's lifecycle tests: `fake_srun --ntasks=N [--flag]...
# program args...` runs N copies of the program in the background with SLURM_PROCID and
# OMPI_COMM_WORLD_RANK set, waits for all of them, and exits with the first non-zero code.
# Records $STOKER_FAKE_OUT/srun.pid and srun.args.
out="${STOKER_FAKE_OUT:?STOKER_FAKE_OUT must be set}"
echo $$ > "$out/srun.pid"
printf '%s\n' "$@" > "$out/srun.args"
ntasks=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ntasks=*) ntasks="${1#--ntasks=}"; shift ;;
    --*=*) shift ;;
    -*) echo "fake srun: options take the --name=value form here ('$1')" >&2; exit 96 ;;
    *) break ;;
  esac
done
[ -n "$ntasks" ] || { echo "fake srun: no --ntasks" >&2; exit 97; }
pids=""
rank=0
while [ "$rank" -lt "$ntasks" ]; do
  SLURM_PROCID=$rank OMPI_COMM_WORLD_RANK=$rank "$@" &
  pids="$pids $!"
  rank=$((rank + 1))
done
code=0
for pid in $pids; do
  wait "$pid"
  status=$?
  [ "$code" -ne 0 ] || code=$status
done
exit "$code"
