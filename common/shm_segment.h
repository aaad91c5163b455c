// SharedMemorySegment: the move-only owner of one mapped POSIX shared-memory segment
// (shm_open + mmap). The creator owns the name and unlinks it on destruction (or earlier,
// with Unlink()); an opener only maps it. Segments are created owner-only (0600) and exclusively
// (O_EXCL), so a stale segment of a crashed job with the same name is reported, never reused.
#ifndef STOKER_COMMON_SHM_SEGMENT_H_
#define STOKER_COMMON_SHM_SEGMENT_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace stoker {

// One mapped shared-memory segment. Move-only; not thread-safe (the mapping itself may be
// used from any thread while the owner is alive).
//
//   ASSIGN_OR_RETURN(SharedMemorySegment seg, SharedMemorySegment::Create("/x.ring.0", n));
//   std::memset(seg.data(), 0, seg.size());  // unmapped and unlinked when `seg` dies
class SharedMemorySegment {
 public:
  // Creates `name` ("/" followed by up to 250 characters, no other "/") with mode 0600,
  // sizes it to `bytes`, reserves its pages (so a full /dev/shm is an error here, not a
  // SIGBUS later) and maps it read-write. AlreadyExists if the name is taken;
  // ResourceExhausted if /dev/shm has no room.
  static absl::StatusOr<SharedMemorySegment> Create(const std::string& name, size_t bytes);

  // Maps the existing segment `name` read-write; its size is the segment's size. The
  // returned object does not unlink the name. PermissionDenied, naming the segment, when it
  // is not this user's or its mode lets others in (anything but 0600/0400 bits).
  static absl::StatusOr<SharedMemorySegment> Open(const std::string& name);

  SharedMemorySegment() = default;
  SharedMemorySegment(SharedMemorySegment&& other) noexcept;
  SharedMemorySegment& operator=(SharedMemorySegment&& other) noexcept;
  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;
  ~SharedMemorySegment();

  // Removes the name now, keeping the mapping (so nothing is left in /dev/shm whatever
  // happens later to the processes that mapped it). Only the creator, and only once:
  // FailedPrecondition otherwise. Afterwards owns_name() is false.
  absl::Status Unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // True when this object created the segment and will unlink it.
  bool owns_name() const { return owns_name_; }

 private:
  SharedMemorySegment(std::string name, void* data, size_t size, bool owns_name)
      : name_(std::move(name)), data_(data), size_(size), owns_name_(owns_name) {}
  void Reset();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owns_name_ = false;
};

// InvalidArgument unless `name` is a valid portable shm name as Create() requires.
absl::Status ValidateSegmentName(absl::string_view name);

// Note [Truncated shared memory]
// A segment is a file: if another process truncates or shrinks it after we mapped it,
// touching a page past its new end raises SIGBUS, which would kill the process with no
// word of why (ring slots, their labels and images, are read from such pages). Every
// SharedMemorySegment registers its mapping while it lives; with the guard installed, a
// SIGBUS whose address lies in a registered mapping writes one error line naming the
// segment, its mapped size and the offset touched ("shared memory truncated: ...") and
// exits with `exit_code` at once (only async-signal-safe calls). Any other SIGBUS is left
// to the default action. The programs pass kExitPeerLost: another process broke the
// segment, not this one's data or flags.

// Installs the guard for the whole process (SIGBUS handler); its line starts with
// "[<who>] E <cause> (exit <exit_code>): " (the log identity, "trainer rank 3", and
// ExitCause(exit_code)), as ReportFailure's lines do. Call from main().
absl::Status InstallTruncatedSharedMemoryGuard(int exit_code, absl::string_view who);

}  // namespace stoker

#endif  // STOKER_COMMON_SHM_SEGMENT_H_
