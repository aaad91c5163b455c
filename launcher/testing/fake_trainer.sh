#!/bin/sh
# A stand-in for the trainer in the launcher's lifecycle tests. It records what it was given
# into $STOKER_FAKE_OUT (trainer.<rank>.pid, trainer.<rank>.args, trainer.<rank>.env), checks
# that --data_socket names a socket (or, in the cluster modes, that --job_id is given), then
# sleeps $STOKER_FAKE_TRAINER_SLEEP seconds in a child
# process (whose pid goes to trainer.<rank>.sleep.pid) and exits $STOKER_FAKE_TRAINER_EXIT,
# or 0 when $STOKER_FAKE_TRAINER_FAILING_RANK names another rank. SIGUSR2 (the stop at a
# step boundary) ends the sleep; then it takes $STOKER_FAKE_TRAINER_STOP_S seconds (its
# "checkpoint"), writes trainer.<rank>.stopped and exits 140, as the trainer does.
rank="${OMPI_COMM_WORLD_RANK:-0}"
out="${STOKER_FAKE_OUT:?STOKER_FAKE_OUT must be set}"
echo $$ > "$out/trainer.$rank.pid"
echo "$$ $PPID" > "$out/trainer.$rank.parent"
printf '%s\n' "$@" > "$out/trainer.$rank.args"
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE-unset}" > "$out/trainer.$rank.env"

socket=""
job_id=""
for arg in "$@"; do
  case "$arg" in
    --data_socket=*) socket="${arg#--data_socket=}" ;;
    --job_id=*) job_id="${arg#--job_id=}" ;;
  esac
done
if [ -z "$job_id" ] && [ ! -S "$socket" ]; then
  echo "fake trainer rank $rank: --data_socket '$socket' is not a socket" >&2
  exit 11
fi

stop_at_step_boundary() {
  kill "$sleeper" 2>/dev/null
  sleep "${STOKER_FAKE_TRAINER_STOP_S:-0}"
  echo "stopped" > "$out/trainer.$rank.stopped"
  exit 140
}
trap stop_at_step_boundary USR2
sleep "${STOKER_FAKE_TRAINER_SLEEP:-0}" &
sleeper=$!
echo $sleeper > "$out/trainer.$rank.sleep.pid"
wait $sleeper

code="${STOKER_FAKE_TRAINER_EXIT:-0}"
failing="${STOKER_FAKE_TRAINER_FAILING_RANK:-$rank}"
[ "$failing" = "$rank" ] || code=0
exit "$code"
