// ShareNodeProgressTable: makes the node's CollectiveProgressTable and gives every local
// rank a mapping of it, over the control communicator, before training starts (Note
// [Collective side channel] in trainer/comm/collective_watchdog.h).
#ifndef STOKER_TRAINER_COMM_NODE_PROGRESS_TABLE_H_
#define STOKER_TRAINER_COMM_NODE_PROGRESS_TABLE_H_

#include <string>

#include "absl/status/statusor.h"
#include "trainer/comm/collective_progress_table.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

// Where a rank sits, as far as the table is concerned. Plain data.
struct NodePlace {
  int local_rank = 0;
  int local_size = 1;
  int node_index = 0;
};

// The table's shared-memory name: "/stoker.<job_id>.collectives.<token>.node<node_index>",
// under the job's prefix so that the sweeps of a dead job's files find it
// (launcher/rank/job_owner.h); "/stoker.<token>.collectives.node<node_index>" without a job id.
std::string NodeProgressTableName(const std::string& job_id, const std::string& token,
                                  int node_index);

// Collective over `control` (host memory): must be called in the same order on every rank.
//  1. rank 0 makes a token unique to this run (its pid and 64 random bits) and broadcasts it;
//  2. each node's local rank 0 creates the node's table (0600, O_EXCL);
//  3. the other local ranks open it;
//  4. local rank 0 removes the name: when this returns, nothing is left in /dev/shm whatever
//     happens to the ranks, and each rank's mapping lives as long as the returned object.
// After each step the ranks agree (an allreduce of failure counts), so that all of them
// fail together, each with its own error or one naming the step that failed elsewhere.
// `job_id` (rank 0's counts; may be empty) goes into the name.
absl::StatusOr<CollectiveProgressTable> ShareNodeProgressTable(Communicator& control,
                                                               const NodePlace& place,
                                                               const std::string& job_id = "");

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_NODE_PROGRESS_TABLE_H_
