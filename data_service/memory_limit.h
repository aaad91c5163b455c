// MemoryLimit: the data service's bound on its own memory (--max_memory), kept by the
// kernel as the process's soft RLIMIT_AS, so that a runaway allocation (a leak, an image
// whose decoding needs far more than its file suggests) fails inside the service, as one
// unusable sample, instead of the node's OOM killer ending trainer ranks.
#ifndef STOKER_DATA_SERVICE_MEMORY_LIMIT_H_
#define STOKER_DATA_SERVICE_MEMORY_LIMIT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace stoker::data_service {

// --max_memory: auto (the default), none, or a size in bytes with an optional binary
// suffix (K, M, G, T, optionally followed by iB or B: "8G", "512MiB", "1073741824").
struct MaxMemory {
  enum class Kind { kAuto, kNone, kBytes };
  Kind kind = Kind::kAuto;
  uint64_t bytes = 0;  // kBytes
};

// InvalidArgument naming --max_memory for anything else, or zero bytes.
absl::StatusOr<MaxMemory> ParseMaxMemory(absl::string_view text);

// What the automatic limit gives each decode thread: the working memory of one large
// image (libjpeg's coefficient buffers, the resampler's intermediate image), its file, and
// the thread's stack and malloc arena (glibc reserves 64 MiB of address space per arena).
inline constexpr uint64_t kDecodeThreadBudget = uint64_t{640} << 20;
// Room for everything else: the connection threads, the listings, libraries' pools.
inline constexpr uint64_t kMemoryMargin = uint64_t{1} << 30;

// The address space of this process now (/proc/self/statm), in bytes.
absl::StatusOr<uint64_t> AddressSpaceInUse();

// The installed limit. Thread-safe.
//
//   ASSIGN_OR_RETURN(auto limit, MemoryLimit::Install(max, decode_threads));
//   RETURN_IF_ERROR(limit->AddRing(name, bytes));  ...  limit->RemoveRing(bytes);
class MemoryLimit {
 public:
  // auto: the address space in use now + decode_threads x kDecodeThreadBudget +
  // kMemoryMargin, plus every ring while it is mapped (AddRing raises the limit first,
  // RemoveRing lowers it after). A size: exactly that; InvalidArgument naming --max_memory
  // when it is below the address space in use now + kMemoryMargin. none: sets nothing.
  // Internal if setrlimit fails.
  static absl::StatusOr<std::unique_ptr<MemoryLimit>> Install(const MaxMemory& max,
                                                              int decode_threads);

  // Makes room for a ring of `bytes` about to be mapped. With a fixed size, ResourceExhausted
  // naming the ring and --max_memory when the rings mapped, this one and the rest would
  // not fit.
  absl::Status AddRing(absl::string_view name, uint64_t bytes);
  // A ring of `bytes` (added before) was unmapped.
  void RemoveRing(uint64_t bytes);

  // The soft RLIMIT_AS set now; 0 with none.
  uint64_t limit_bytes();
  // For the start-up log line: "--max_memory=auto: 3.4 GiB now (...)".
  std::string Describe();

 private:
  MemoryLimit(const MaxMemory& max, int decode_threads, uint64_t in_use_at_start)
      : max_(max), decode_threads_(decode_threads), in_use_at_start_(in_use_at_start) {}
  uint64_t WantedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MaxMemory max_;
  const int decode_threads_;
  const uint64_t in_use_at_start_;
  absl::Mutex mu_;
  uint64_t ring_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_MEMORY_LIMIT_H_
