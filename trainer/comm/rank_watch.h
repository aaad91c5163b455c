// RankWatch: one training rank's collective deadlines (Note [Collective deadline] in
// trainer/comm/collective_watchdog.h): the node's progress table, shared by the node's ranks,
// and the watchdog over the rank's communicators, which ends the process with the timeout
// exit code when a collective outlives --collective_timeout_s.
#ifndef STOKER_TRAINER_COMM_RANK_WATCH_H_
#define STOKER_TRAINER_COMM_RANK_WATCH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/rank/rank_setup.h"
#include "trainer/comm/collective_progress_table.h"
#include "trainer/comm/collective_watchdog.h"
#include "trainer/comm/comm_options.h"
#include "trainer/comm/communicator.h"

namespace stoker::trainer {

struct RankWatch {
  explicit RankWatch(CollectiveProgressTable table) : table(std::move(table)) {}
  CollectiveProgressTable table;  // the watchdog reports into it: declared first
  std::unique_ptr<CollectiveWatchdog> watchdog;
};

// Shares the node's progress table over `host` (a collective of the node's ranks, the same
// order on every rank) and starts the watchdog over `communicators`.
absl::StatusOr<std::unique_ptr<RankWatch>> WatchRank(const CommOptions& options,
                                                     const launcher::RankInfo& rank,
                                                     const std::string& job_id, Communicator& host,
                                                     std::vector<Communicator*> communicators);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_RANK_WATCH_H_
