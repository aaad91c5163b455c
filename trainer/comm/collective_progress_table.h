// CollectiveProgressTable: a small shared-memory table, one per node, in which every local
// rank publishes its collective progress (per communicator: the last collective issued and
// the last completed, from its CollectiveLedger) and a heartbeat. It is the side channel
// that does not go through the collectives themselves: when one stalls, a rank's watchdog
// reads here which local ranks are behind and which of them stopped beating (Note
// [Collective side channel] in trainer/comm/collective_watchdog.h).
#ifndef STOKER_TRAINER_COMM_COLLECTIVE_PROGRESS_TABLE_H_
#define STOKER_TRAINER_COMM_COLLECTIVE_PROGRESS_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/shm_segment.h"
#include "trainer/comm/collective_ledger.h"

namespace stoker::trainer {

// Communicators a rank can publish: gradients and control (the same one on the CPU).
inline constexpr int kMaxProgressChannels = 2;

// One local rank's entry. In shared memory: written by that rank only, read by all, every
// field with LoadAcquire/StoreRelease (Note [Atomics in shared memory]).
struct RankProgress {
  int32_t rank = -1;  // global rank; -1 until the rank joined
  int32_t pid = 0;
  int64_t heartbeat_ns = 0;  // MonotonicNanos() of the rank's last heartbeat
  ChannelProgress channels[kMaxProgressChannels];
  char reserved[48] = {};
};
static_assert(sizeof(RankProgress) == 128 && std::is_trivially_copyable_v<RankProgress>,
              "RankProgress is a shared-memory layout");

// The table's first bytes.
struct ProgressTableHeader {
  static constexpr uint32_t kMagic = 0x53434f4c;  // "SCOL"
  static constexpr uint32_t kVersion = 1;
  uint32_t magic;
  uint32_t version;
  int32_t local_size;
  int32_t reserved0;
  char reserved[48];
};
static_assert(sizeof(ProgressTableHeader) == 64, "ProgressTableHeader is a shared-memory layout");

// The mapped table, held in a SharedMemorySegment. Move-only. Creator:
// Create() makes the segment (owner-only, 0600, O_EXCL) and, once every local rank has
// opened it, Unlink() removes its name, so that nothing can be left in /dev/shm even when
// ranks die later (the mapping lives on). Not thread-safe as an object; the slots
// themselves are read and written atomically (see RankProgress).
//
//   local rank 0: ASSIGN_OR_RETURN(auto table, CollectiveProgressTable::Create(name, n));
//   others:       ASSIGN_OR_RETURN(auto table, CollectiveProgressTable::Open(name, n));
//   ... node barrier ...; local rank 0: RETURN_IF_ERROR(table.Unlink());
class CollectiveProgressTable {
 public:
  // Creates the segment `name` ("/" and up to 250 characters without '/') for `local_size`
  // ranks. AlreadyExists when the name is taken; InvalidArgument for a bad name or size.
  static absl::StatusOr<CollectiveProgressTable> Create(const std::string& name, int local_size);
  // Maps the existing table `name`, which must be for `local_size` ranks (FailedPrecondition
  // otherwise, or when it is not a progress table of this version).
  static absl::StatusOr<CollectiveProgressTable> Open(const std::string& name, int local_size);

  CollectiveProgressTable(CollectiveProgressTable&& other) noexcept = default;
  CollectiveProgressTable& operator=(CollectiveProgressTable&& other) noexcept = default;
  CollectiveProgressTable(const CollectiveProgressTable&) = delete;
  CollectiveProgressTable& operator=(const CollectiveProgressTable&) = delete;
  // Unmaps; the creator also unlinks the name if Unlink() was not called.
  ~CollectiveProgressTable() = default;

  // Removes the name (creator only, once; FailedPrecondition otherwise). The mapping stays.
  absl::Status Unlink();

  int local_size() const { return header()->local_size; }
  RankProgress& slot(int local_rank) const;
  const std::string& name() const { return segment_.name(); }

  // The segment's size for `local_size` ranks.
  static size_t BytesFor(int local_size);

 private:
  explicit CollectiveProgressTable(SharedMemorySegment segment) : segment_(std::move(segment)) {}
  ProgressTableHeader* header() const { return static_cast<ProgressTableHeader*>(segment_.data()); }

  SharedMemorySegment segment_;
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_COMM_COLLECTIVE_PROGRESS_TABLE_H_
