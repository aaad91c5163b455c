#include "trainer/comm/node_progress_table.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/names.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

constexpr size_t kTokenBytes = 48;

// Step agreement: OK when no rank failed; else this rank's own error, or one saying that
// another rank failed `step`.
absl::Status Agree(Communicator& control, const absl::Status& local, const char* step) {
  int64_t failures = local.ok() ? 0 : 1;
  if (control.world_size() > 1) {
    RETURN_IF_ERROR(control.AllReduce(&failures, 1, ElementType::kInt64, ReduceOp::kSum));
    RETURN_IF_ERROR(control.Synchronize());
  }
  if (!local.ok()) return local;
  if (failures > 0) {
    return absl::UnavailableError(
        absl::StrCat(failures, " rank(s) could not ", step,
                     " the collective progress table (their logs say why)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string NodeProgressTableName(const std::string& job_id, const std::string& token,
                                  int node_index) {
  if (job_id.empty()) return absl::StrCat("/stoker.", token, ".collectives.node", node_index);
  return absl::StrCat("/stoker.", job_id, ".collectives.", token, ".node", node_index);
}

absl::StatusOr<CollectiveProgressTable> ShareNodeProgressTable(Communicator& control,
                                                               const NodePlace& place,
                                                               const std::string& job_id) {
  // Rank 0's token and job id, so that every rank names the same table.
  char token[kTokenBytes] = {};
  char job[kMaxJobIdLength + 1] = {};
  if (control.rank() == 0) {
    std::random_device random;
    const uint64_t bits = (static_cast<uint64_t>(random()) << 32) ^ random();
    const std::string text = absl::StrFormat("run-%d-%016x", getpid(), bits);
    std::memcpy(token, text.data(), std::min(text.size(), kTokenBytes - 1));
    if (ValidateJobId(job_id).ok()) {
      std::memcpy(job, job_id.data(), std::min(job_id.size(), sizeof(job) - 1));
    }
  }
  if (control.world_size() > 1) {
    RETURN_IF_ERROR(control.Broadcast(token, sizeof(token), 0));
    RETURN_IF_ERROR(control.Broadcast(job, sizeof(job), 0));
    RETURN_IF_ERROR(control.Synchronize());
  }
  const std::string name = NodeProgressTableName(job, token, place.node_index);

  absl::StatusOr<CollectiveProgressTable> table = absl::FailedPreconditionError("not made");
  absl::Status status = absl::OkStatus();
  if (place.local_rank == 0) {
    table = CollectiveProgressTable::Create(name, place.local_size);
    status = table.status();
  }
  RETURN_IF_ERROR(Agree(control, status, "create"));
  if (place.local_rank != 0) {
    table = CollectiveProgressTable::Open(name, place.local_size);
    status = table.status();
  }
  RETURN_IF_ERROR(Agree(control, status, "open"));
  status = absl::OkStatus();
  if (place.local_rank == 0) status = table->Unlink();
  RETURN_IF_ERROR(Agree(control, status, "remove the name of"));
  return table;
}

}  // namespace stoker::trainer
