#!/usr/bin/env bash
# /dev/shm too small for the rings. /dev/shm is an 8 MiB tmpfs (in a private mount
# namespace); each rank asks for a ring of several times that. tmpfs would accept the
# ftruncate and kill the data service with SIGBUS on the first write; instead the ring's
# pages are reserved when it is created, so the job fails before the first training step,
# within a bounded time, with a message naming /dev/shm, the bytes needed and the bytes
# free, exits 2 (a configuration to fix, not a fault to requeue: common/exit_codes.h) and
# leaves no segment, process or socket behind.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
in_private_mount_namespace "$0" "$@"
begin_job_test  # Open MPI's own shared memory goes to its session directory
mount -t tmpfs -o size=8m stoker-test-shm /dev/shm

job="smallshm-$$-$RANDOM"
start=$SECONDS
set +e
timeout 300 "$root/launcher/launcher" --np=2 --job_id="$job" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic --synthetic_samples=512 --synthetic_classes=4 --data_threads=1 -- \
  --model=small_cnn --num_classes=4 --image_size=160 --batch_size=64 --epochs=1 \
  --loss_log="$out/loss.txt" > "$out/job.log" 2>&1
rc=$?
set -e
elapsed=$(( SECONDS - start ))
echo "the job ended after $elapsed s with exit code $rc"
grep -i "dev/shm" "$out/job.log" | head -n 2 || true
expect_exit "$out/job.log" 2 "$rc" \
  "^\[trainer rank [01] [^]]*\] E bad flag or configuration \(exit 2\): .*refused the ring request of rank [01]: .*/dev/shm" ||
  exit 1
[[ $elapsed -lt 120 ]] || { echo "FAIL: the failure took $elapsed s"; exit 1; }
# The service checks the free space when a ring is requested; the segment's reservation
# (posix_fallocate) catches what that check cannot (another job filling /dev/shm between
# the two). Either message names /dev/shm, the bytes needed and the bytes free.
grep -E "needs [0-9]+ bytes but /dev/shm has only [0-9]+ free|/dev/shm has no room for its [0-9]+ bytes \([0-9]+ bytes free of 8388608\)" \
  "$out/job.log" | grep "refused the ring request of rank" >/dev/null ||
  { cat "$out/job.log"; echo "FAIL: no message naming /dev/shm with the sizes reached the trainer"; exit 1; }
if grep -q "Bus error\|SIGBUS" "$out/job.log"; then echo "FAIL: a SIGBUS"; exit 1; fi
[[ ! -s "$out/loss.txt" ]] || { echo "FAIL: training started: $(wc -l < "$out/loss.txt") steps"; exit 1; }
assert_nothing_left "$job"
[[ -z "$(ls -A /dev/shm)" ]] || { echo "FAIL: left in /dev/shm: $(ls -A /dev/shm)"; exit 1; }
echo "PASS"
