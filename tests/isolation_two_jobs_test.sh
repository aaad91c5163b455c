#!/usr/bin/env bash
# Two jobs on one node at the same time do not collide: each launcher (2 CPU ranks) gets its
# own job directory, data-service socket and ring segments, all named after its job id (one
# id given, one generated), all owner-only (directory 0700, socket and segments 0600, seen
# while the jobs run); a third launch that reuses a running job's id is refused without
# touching that job; both jobs train to the end, and nothing of either is left.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test

# Six epochs, so that each job's ring segments live long enough (a few seconds) for the
# sampling loop below to see them on a loaded machine. Each job's mpirun has a session
# directory of its own: two mpiruns that create the same one at the same moment can both try
# its mkdir, and the loser fails to start ("File exists").
run_job() {  # NAME [--job_id=ID]: a small job in the background, its log in $out/NAME.log
  local name="$1"; shift
  local session="$STOKER_TEST_OMPI_DIR/$name"
  mkdir -p "$session"
  OMPI_MCA_orte_tmpdir_base="$session" OMPI_MCA_btl_vader_backing_directory="$session" \
  "$root/launcher/launcher" --np=2 "$@" \
    --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
    --dataset=synthetic --synthetic_samples=256 --synthetic_classes=4 --data_threads=1 -- \
    --model=small_cnn --num_classes=4 --image_size=16 --batch_size=16 --epochs=6 --lr=0.05 \
    --log_every=1 --loss_log="$out/$name.loss" > "$out/$name.log" 2>&1 &
}

job_a="isoA-$$-$RANDOM"
run_job a --job_id="$job_a"
pid_a=$!
run_job b  # a generated id: <host>-<launcher pid>-<hex>
pid_b=$!

# While both run: find B's id from its launcher's pid, and record what each job has.
job_b=""
declare -A seen
deadline=$((SECONDS + 240))
while kill -0 "$pid_a" 2>/dev/null || kill -0 "$pid_b" 2>/dev/null; do
  (( SECONDS < deadline )) || { echo "FAIL: the jobs did not end within 240 s"; exit 1; }
  if [[ -z "$job_b" ]]; then
    dir_b=$(ls -d /tmp/stoker.*-"$pid_b"-* 2>/dev/null | head -n 1 || true)
    [[ -n "$dir_b" ]] && job_b="${dir_b#/tmp/stoker.}"
  fi
  for job in "$job_a" $job_b; do
    for path in "/tmp/stoker.$job" "/tmp/stoker.$job/data.sock" /dev/shm/stoker."$job".*; do
      mode=$(stat -c %a "$path" 2>/dev/null) || continue
      seen["$path"]="$mode"
    done
  done
  sleep 0.1
done
wait "$pid_a" || { rc=$?; cat "$out/a.log"; echo "FAIL: job A exited $rc"; exit 1; }
wait "$pid_b" || { rc=$?; cat "$out/b.log"; echo "FAIL: job B exited $rc"; exit 1; }
[[ -n "$job_b" ]] || { echo "FAIL: job B's directory /tmp/stoker.*-$pid_b-* was never seen"; exit 1; }
[[ "$job_a" != "$job_b" ]] || { echo "FAIL: both jobs have id $job_a"; exit 1; }
echo "job A $job_a and job B $job_b ran at the same time"

for path in "${!seen[@]}"; do echo "  ${seen[$path]} $path"; done | sort -k2
for job in "$job_a" "$job_b"; do
  [[ "${seen[/tmp/stoker.$job]:-}" == 700 ]] ||
    { echo "FAIL: job directory of $job: mode ${seen[/tmp/stoker.$job]:-not seen}, not 700"; exit 1; }
  [[ "${seen[/tmp/stoker.$job/data.sock]:-}" == 600 ]] ||
    { echo "FAIL: socket of $job: mode ${seen[/tmp/stoker.$job/data.sock]:-not seen}, not 600"; exit 1; }
  for rank in 0 1; do
    segment="/dev/shm/stoker.$job.ring.$rank"
    [[ "${seen[$segment]:-}" == 600 ]] ||
      { echo "FAIL: $segment: mode ${seen[$segment]:-not seen}, not 600"; exit 1; }
  done
done
for path in "${!seen[@]}"; do
  [[ "$path" == *"stoker.$job_a"[./]* || "$path" == "/tmp/stoker.$job_a" ||
     "$path" == *"stoker.$job_b"[./]* || "$path" == "/tmp/stoker.$job_b" ]] ||
    { echo "FAIL: $path belongs to neither job"; exit 1; }
done

# Both trained to the end: 256 samples / 2 ranks / 16 = 8 steps per epoch, 6 epochs.
for name in a b; do
  steps=$(wc -l < "$out/$name.loss")
  [[ "$steps" -eq 48 ]] || { echo "FAIL: job $name logged $steps steps, not 48"; exit 1; }
done

# A launch that reuses a running job's id is refused and leaves that job alone.
run_job c2 --job_id="$job_a"
pid_c2=$!
for _ in $(seq 300); do [[ -S "/tmp/stoker.$job_a/data.sock" ]] && break; sleep 0.1; done
[[ -S "/tmp/stoker.$job_a/data.sock" ]] || { cat "$out/c2.log"; echo "FAIL: job $job_a did not start again"; exit 1; }
set +e
"$root/launcher/launcher" --np=2 --job_id="$job_a" \
  --trainer="$root/trainer/trainer" --data_service="$root/data_service/data_service" \
  --dataset=synthetic -- --model=small_cnn > "$out/c.log" 2>&1
rc=$?
set -e
cat "$out/c.log"
[[ "$rc" -ne 0 ]] || { echo "FAIL: a second job with id $job_a was started"; exit 1; }
grep -q "/tmp/stoker.$job_a" "$out/c.log" ||
  { echo "FAIL: the refusal does not name the job directory"; exit 1; }
wait "$pid_c2" ||
  { rc=$?; cat "$out/c2.log"; echo "FAIL: the running job $job_a failed ($rc) after the refused launch"; exit 1; }

assert_nothing_left "$job_a" "$pid_a" "$pid_c2"
assert_nothing_left "$job_b" "$pid_b"
echo "PASS: two concurrent jobs had distinct owner-only names, a reused id was refused"
