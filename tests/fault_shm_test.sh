#!/usr/bin/env bash
# Faults of a job's shared memory made by another process (common/exit_codes.h: another
# process is at fault, or the node's configuration, never the dataset):
#  1. a ring segment truncated under a running job (another process of the same user
#     shrinks /dev/shm/stoker.<job>.ring.0): the first process that touches a page past the
#     new end (rank 0 or the data service) does not die of a bare SIGBUS but logs
#     "peer lost (exit 69): shared memory truncated: /stoker.<job>.ring.0 was mapped with N
#     bytes, but byte M ..." and exits 69 (Note [Truncated shared memory] in
#     common/shm_segment.h); the job exits 69;
#  2. the labels of a running job's ring slots overwritten (out of --num_classes) by
#     another process: rank 0's check of each slot it takes (Note [Slot contents are
#     checked] in data_service/ring/ring_client.cc) ends it with "peer lost (exit 69): ...
#     holds label 1000 ..."; the job exits 69, not 65 (the dataset is not at fault);
#  3. another user's segment squatting the name of a job's ring (as root: a segment of uid
#     65534 made before the job starts): the job is refused before training, naming the
#     segment, exit 2 (a configuration to fix: another job id); the squatter's segment is
#     left as it was.
# Bound: each job ends within 10 s of the fault (3: of its start, 60 s), and nothing of it
# is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# wait_for_failure LIMIT: the launcher ($launcher_pid) exits within LIMIT seconds; sets
# code and took.
wait_for_failure() {
  local limit="$1" start=$SECONDS
  code=0
  wait "$launcher_pid" || code=$?
  took=$((SECONDS - start))
  echo "the job exited with code $code $took s after the fault"
  [[ "$took" -le "$limit" ]] || { cat "$log"; echo "FAIL: the job took more than $limit s to end"; exit 1; }
}

echo "== 1: a ring segment truncated"
launch_training_job shmtrunc
truncate -s 4096 "/dev/shm/stoker.$job.ring.0"
wait_for_failure 10
expect_exit "$log" 69 "$code" \
  "^\[(trainer rank 0|data_service node 0)\] E peer lost \(exit 69\): shared memory truncated: /stoker\.$job\.ring\.0 was mapped with [0-9]+ bytes, but byte [0-9]+ is past the end" ||
  exit 1
if grep -q "Bus error\|signal 7 (SIGBUS)\|exited on signal 7" "$log"; then
  cat "$log"; echo "FAIL: a process died of SIGBUS"; exit 1
fi
assert_nothing_left "$job"

echo "== 2: a ring's slots overwritten"
launch_training_job slotcorrupt
# Label 1000 in every slot of rank 0's ring, again and again for up to 8 s, so that a slot
# the service publishes is overwritten before rank 0 takes it.
"$python" - "/dev/shm/stoker.$job.ring.0" "$launcher_pid" <<'PY' || true
import mmap, os, struct, sys, time
path, launcher = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    ring = mmap.mmap(f.fileno(), 0)
(_, _, _, slots, batch, _, _, meta_offset, meta_stride) = struct.unpack_from("<QIIiiiiQQ", ring, 0)
labels_offset = 64 + 8 * batch  # RingSlotMeta, then the sample indices
bad = struct.pack(f"<{batch}i", *([1000] * batch))
end = time.time() + 8
while time.time() < end:
    for slot in range(slots):
        at = meta_offset + slot * meta_stride + labels_offset
        ring[at:at + len(bad)] = bad
    try:
        os.kill(launcher, 0)
    except ProcessLookupError:
        break
PY
wait_for_failure 10
expect_exit "$log" 69 "$code" \
  "^\[trainer rank 0 [^]]*\] E peer lost \(exit 69\): OUT_OF_RANGE: .*ring slot [0-9]+ \(epoch [0-9]+, step [0-9]+\) holds label 1000" ||
  exit 1
assert_nothing_left "$job"

echo "== 3: another user's segment under a ring's name"
if [[ "$(id -u)" -ne 0 ]]; then
  echo "SKIP (squatted segment): needs root to make a segment of another user (uid $(id -u))"
  echo "PASS"
  exit 0
fi
job="squatted-$$-$RANDOM"
log="$out/squatted.log"
squat="/dev/shm/stoker.$job.ring.0"
install -m 0600 -o 65534 -g 65534 /dev/null "$squat"
trap 'rm -f "$squat"' EXIT
[[ "$(stat -c %u "$squat")" == 65534 ]] || { echo "FAIL: cannot make a segment of uid 65534 here"; exit 1; }
start=$SECONDS
code=0
timeout --signal=KILL 120 "$root/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=256 --synthetic_classes=4 --data_threads=1 -- \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=1 \
  --loss_log="$log.loss" > "$log" 2>&1 || code=$?
echo "the job exited with code $code after $((SECONDS - start)) s"
[[ $((SECONDS - start)) -le 60 ]] || { cat "$log"; echo "FAIL: the job took more than 60 s"; exit 1; }
expect_exit "$log" 2 "$code" \
  "^\[trainer rank 0 [^]]*\] E bad flag or configuration \(exit 2\): .*refused the ring request of rank 0: shared-memory segment /stoker\.$job\.ring\.0 already exists and belongs to uid 65534, not to this user \(uid 0\): use another job id" ||
  exit 1
[[ ! -s "$log.loss" ]] || { cat "$log"; echo "FAIL: it trained"; exit 1; }
[[ "$(stat -c %u "$squat")" == 65534 ]] || { echo "FAIL: the squatter's segment was changed"; exit 1; }
rm -f "$squat"
trap - EXIT
assert_nothing_left "$job"
echo "PASS"
