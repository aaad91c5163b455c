#include "trainer/comm/rank_watch.h"

#include <utility>

#include "common/exit_codes.h"
#include "common/status_macros.h"
#include "trainer/comm/node_progress_table.h"

namespace stoker::trainer {

absl::StatusOr<std::unique_ptr<RankWatch>> WatchRank(const CommOptions& options,
                                                     const launcher::RankInfo& rank,
                                                     const std::string& job_id, Communicator& host,
                                                     std::vector<Communicator*> communicators) {
  ASSIGN_OR_RETURN(CollectiveProgressTable table,
                   ShareNodeProgressTable(
                       host, NodePlace{rank.local_rank, rank.local_size, rank.node_index}, job_id));
  auto watch = std::make_unique<RankWatch>(std::move(table));
  CollectiveWatchdogOptions watchdog;
  watchdog.timeout = options.collective_timeout;
  watchdog.abort_grace = options.collective_abort_grace;
  watchdog.exit_code = ::stoker::kExitTimeout;
  ASSIGN_OR_RETURN(
      watch->watchdog,
      CollectiveWatchdog::Start(
          watchdog, WatchedRank{rank.rank, rank.world_size, rank.local_rank, rank.node_index},
          std::move(communicators), &watch->table));
  return watch;
}

}  // namespace stoker::trainer
