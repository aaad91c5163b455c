#!/usr/bin/env bash
# Two "nodes" on one machine: `mpirun -np 4 trainer --ranks_per_node=2` splits the ranks into
# nodes {0,1} and {2,3} (Note [Forced node split] in launcher/rank/rank_setup.h). Each node's local
# rank 0 starts its own data service (node ids 0 and 1, sockets of their own in the job's
# owner-only directory, which both share), each rank reads
# from its own node's service, and the whole epoch is covered exactly once across the nodes,
# in one order shared by all ranks.
set -euo pipefail
source "${TEST_SRCDIR}/stoker/tests/job_checks.sh"
begin_job_test
job="twonode-$$-$RANDOM"
samples=512  # 4 ranks x 8 batches of 16: no padding, no short batch

# While the job runs: the modes and owners of its directory and sockets, as other users see
# them (Note [Job directory of the nodes] in launcher/rank/job_files.h).
(
  for _ in $(seq 2400); do
    stat -c '%n %a %u' "/tmp/stoker.$job" "/tmp/stoker.$job"/node*.sock 2>/dev/null || true
    sleep 0.1
  done
) > "$out/modes" &
watcher=$!
trap 'kill "$watcher" 2>/dev/null || true; rm -rf "$STOKER_TEST_OMPI_DIR"' EXIT

timeout --signal=KILL 240 mpirun -np 4 "$root/trainer/trainer" --ranks_per_node=2 --job_id="$job" \
  --data_service="$root/data_service/data_service" \
  --data_service_args="--dataset=synthetic --synthetic_samples=$samples --synthetic_classes=4 --threads=1" \
  --model=small_cnn --num_classes=4 --image_size=32 --batch_size=16 --epochs=2 --lr=0.05 \
  --log_every=4 --sample_log="$out/samples" --final_params_out="$out/params" 2>&1 | tee "$out/log"

kill "$watcher" 2>/dev/null || true
sort -u "$out/modes" > "$out/modes.seen"
echo "seen while the job ran:"; cat "$out/modes.seen"
uid=$(id -u)
grep -qx "/tmp/stoker.$job 700 $uid" "$out/modes.seen" ||
  { echo "FAIL: the job directory /tmp/stoker.$job was not seen as mode 700 of uid $uid"; exit 1; }
if grep -v -x -e "/tmp/stoker.$job 700 $uid" -e "/tmp/stoker.$job/node[01].sock 600 $uid" \
    "$out/modes.seen"; then
  echo "FAIL: a job directory or socket of another mode or owner (above)"; exit 1
fi

# One data service per node, each with its node id and socket (both in the job's
# directory), and distinct processes.
pids=()
for node in 0 1; do
  socket="/tmp/stoker.$job/node$node.sock"
  line=$(grep -o "node $node: data service (pid [0-9]*) ready on $socket" "$out/log") ||
    { echo "FAIL: node $node's local rank 0 did not start a data service on $socket"; exit 1; }
  pids+=("$(pid_records "$out/log" role=data_service node="$node" | head -n 1)")
  grep -q "\[data_service node $node .*listening on $socket (job $job, node $node," "$out/log" ||
    { echo "FAIL: no data service with node id $node on $socket"; exit 1; }
done
[[ "${pids[0]}" != "${pids[1]}" ]] || { echo "FAIL: both nodes report one process"; exit 1; }
echo "data services: node 0 pid ${pids[0]}, node 1 pid ${pids[1]}"

# Each rank registered with its own node's service, and only there.
for rank in 0 1 2 3; do
  node=$((rank / 2)); other=$((1 - node))
  grep -q "\[data_service node $node .*\] I rank $rank of 4 " "$out/log" ||
    { echo "FAIL: rank $rank did not read from node $node's data service"; exit 1; }
  if grep -q "\[data_service node $other .*\] I rank $rank of 4 " "$out/log"; then
    echo "FAIL: rank $rank registered with node $other's data service"; exit 1
  fi
done
echo "ranks 0,1 read from node 0's service, ranks 2,3 from node 1's"

"$(stoker_python)" "$root/tests/check_sample_log.py" "$out/samples" --world=4 --epochs=2 \
  --samples="$samples"
for rank in 1 2 3; do
  cmp "$out/params.rank0" "$out/params.rank$rank" ||
    { echo "FAIL: parameters of rank $rank differ from rank 0's"; exit 1; }
done

assert_nothing_left "$job" "${pids[@]}"
echo "PASS"
