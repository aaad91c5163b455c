#!/usr/bin/env bash
# Isolation of one data service (the real binary), driven by a raw control-socket client
# (tests/isolation_probe.py): its socket and ring segments are owner-only (0600); a peer of
# another user is refused by the service's SO_PEERCRED check (needs root: the client forks
# and switches to uid 65534; skipped, saying so, otherwise); malformed, oversized, badly
# filled and flooding control messages are refused with a clear error, closing only their
# own connection; a second service of the same job id cannot take a ring segment that the
# first holds. After all of that the service still serves its own user, and SIGTERM leaves
# nothing behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
python="$(stoker_python) -u"
probe="$root/tests/isolation_probe.py"
service_bin="$root/data_service/data_service"

dir=$(mktemp -d /tmp/stoker-iso.XXXXXX)  # short: a Unix socket path must fit 108 bytes
job="iso-$$-$RANDOM"
service_pid="" other_pid="" holder_pid=""
cleanup() {
  for pid in $holder_pid $other_pid $service_pid; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
  rm -f /dev/shm/stoker."$job".*  # only after a failure: a service that died leaves its rings
}
trap cleanup EXIT

start_service() {  # SOCKET LOG PID_VARIABLE: a child of this shell, so that `wait` works
  "$service_bin" --socket="$1" --job_id="$job" --dataset=synthetic --synthetic_samples=64 \
    --synthetic_classes=2 --threads=1 > "$2" 2>&1 &
  printf -v "$3" %s $!
  for _ in $(seq 200); do [[ -S "$1" ]] && break; sleep 0.05; done
  [[ -S "$1" ]] || { cat "$2"; echo "FAIL: no socket $1 after 10 s"; exit 1; }
}

socket="$dir/data.sock"
start_service "$socket" "$dir/service.log" service_pid
mode=$(stat -c %a "$socket")
[[ "$mode" == 600 ]] || { echo "FAIL: socket $socket has mode $mode, not 600"; exit 1; }
echo "socket $socket mode $mode"

# A valid client: the segment is owner-only, epochs start.
$python "$probe" register "$socket" "$job" 0

# Malformed, oversized and badly filled messages, and a flood of garbage connections.
$python "$probe" malformed "$socket"
$python "$probe" oversized "$socket"
$python "$probe" length-prefix "$socket"
$python "$probe" bad-fields "$socket"
$python "$probe" flood "$socket" 200
kill -0 "$service_pid" 2>/dev/null || { cat "$dir/service.log"; echo "FAIL: the service died"; exit 1; }

# A peer of another user. Open the directory and the socket so that only the service's
# credential check stands in the way.
other_user="skipped"
if [[ "$(id -u)" -eq 0 ]]; then
  chmod 0755 "$dir"
  chmod 0777 "$socket"
  set +e
  $python "$probe" other-user "$socket" 65534
  rc=$?
  set -e
  chmod 0700 "$dir"
  chmod 0600 "$socket"
  if [[ "$rc" -eq 77 ]]; then
    echo "SKIP (other user): cannot switch to uid 65534 here (a user namespace?)"
  elif [[ "$rc" -ne 0 ]]; then
    echo "FAIL: a peer of uid 65534 was not refused"; exit 1
  else
    grep -q "refusing a connection from pid [0-9]*: uid 65534 is not the service's uid 0" \
      "$dir/service.log" || { cat "$dir/service.log"; echo "FAIL: the refusal is not logged"; exit 1; }
    other_user="refused"
  fi
else
  echo "SKIP (other user): needs root to act as another user (running as uid $(id -u))"
fi

# A second service of the same job (another socket) cannot take a segment the first holds.
coproc HOLDER { $python "$probe" register "$socket" "$job" 1 --hold; }
holder_pid=$HOLDER_PID
read -r -t 30 line <&"${HOLDER[0]}"  # "registered: ..."
echo "holder: $line"
start_service "$dir/other.sock" "$dir/other.log" other_pid
$python "$probe" taken "$dir/other.sock" "$job" 1
kill -TERM "$other_pid"
wait "$other_pid" || { rc=$?; cat "$dir/other.log"; echo "FAIL: the second service exited $rc"; exit 1; }
other_pid=""
[[ -e "/dev/shm/stoker.$job.ring.1" ]] ||
  { echo "FAIL: the second service removed the first one's segment"; exit 1; }
eval "exec ${HOLDER[1]}>&-"  # closes the holder's stdin: it disconnects
wait "$holder_pid" || { echo "FAIL: the holding client failed"; exit 1; }
holder_pid=""

# The service still serves its own user, and logged why it closed the bad connections.
$python "$probe" register "$socket" "$job" 0
grep -q "after a bad control message: control packet of 65536 bytes" "$dir/service.log" ||
  { cat "$dir/service.log"; echo "FAIL: the oversized message is not logged"; exit 1; }
kill -TERM "$service_pid"
wait "$service_pid" || { rc=$?; cat "$dir/service.log"; echo "FAIL: the service exited $rc on SIGTERM"; exit 1; }
service_pid=""
[[ ! -e "$socket" ]] || { echo "FAIL: socket left"; exit 1; }
leftover=$(ls /dev/shm | grep -F "stoker.$job." || true)
[[ -z "$leftover" ]] || { echo "FAIL: segments left: $leftover"; exit 1; }
echo "PASS: modes 0600, bad messages refused, other user $other_user, segments not shared, nothing left"
