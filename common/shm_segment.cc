#include "common/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/exit_codes.h"
#include "common/unique_fd.h"

namespace stoker {

namespace {

// Note [Truncated shared memory]: the live mappings, readable from a signal handler. A
// slot is free while `begin` is 0; its name is written before `begin` is published.
struct RegisteredMapping {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> size{0};
  char name[256] = {};
};
constexpr int kMaxMappings = 256;
RegisteredMapping g_mappings[kMaxMappings];
std::atomic<int> g_guard_exit_code{1};
char g_guard_who[128] = "shared memory";
char g_guard_cause[64] = "failure";  // ExitCause(g_guard_exit_code)

void RegisterMapping(const void* data, size_t size, const std::string& name) {
  for (RegisteredMapping& slot : g_mappings) {
    uintptr_t expected = 0;
    // Claim with a marker (1 is never a mapping's address), fill in, then publish.
    if (!slot.begin.compare_exchange_strong(expected, 1)) continue;
    const size_t n = std::min(name.size(), sizeof(slot.name) - 1);
    std::memcpy(slot.name, name.data(), n);
    slot.name[n] = '\0';
    slot.size.store(size);
    slot.begin.store(reinterpret_cast<uintptr_t>(data));
    return;
  }
  // More live mappings than slots: this one goes unguarded (SIGBUS stays the default).
}

void UnregisterMapping(const void* data) {
  for (RegisteredMapping& slot : g_mappings) {
    if (slot.begin.load() == reinterpret_cast<uintptr_t>(data)) {
      slot.size.store(0);
      slot.begin.store(0);
      return;
    }
  }
}

// Async-signal-safe pieces of the guard's line.
void WriteText(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, strlen(text));
  (void)ignored;
}
void WriteNumber(uint64_t value) {
  char digits[24];
  int n = 0;
  do {
    digits[sizeof(digits) - 1 - n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0 && n < static_cast<int>(sizeof(digits)));
  ssize_t ignored = write(STDERR_FILENO, digits + sizeof(digits) - n, static_cast<size_t>(n));
  (void)ignored;
}

void OnSigbus(int signal, siginfo_t* info, void*) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const RegisteredMapping& slot : g_mappings) {
    const uintptr_t begin = slot.begin.load();
    const size_t size = slot.size.load();
    if (begin <= 1 || address < begin || address >= begin + size) continue;
    const int code = g_guard_exit_code.load();
    WriteText("[");
    WriteText(g_guard_who);
    WriteText("] E ");
    WriteText(g_guard_cause);
    WriteText(" (exit ");
    WriteNumber(static_cast<uint64_t>(code));
    WriteText("): shared memory truncated: ");
    WriteText(slot.name);
    WriteText(" was mapped with ");
    WriteNumber(size);
    WriteText(" bytes, but byte ");
    WriteNumber(address - begin);
    WriteText(" is past the end of the segment now (another process truncated or resized it)\n");
    _exit(code);
  }
  // Not ours: the default action (on return, for a fault; raised again, for a kill).
  ::signal(signal, SIG_DFL);
  raise(signal);
}

// Note [A full /dev/shm]
// tmpfs gives a segment its pages on first touch, so ftruncate() succeeds on a /dev/shm
// that is too small and the producer would die of SIGBUS in the middle of a batch.
// Create() reserves every page with posix_fallocate() instead: a ring that does not fit
// fails there, when the ring is requested and before training starts, with the sizes
// needed and free (a container's default /dev/shm is 64 MiB; docker run --shm-size).
absl::Status NoRoomInDevShm(const std::string& name, size_t bytes) {
  std::string free_text = "unknown";
  struct statvfs fs;
  if (statvfs("/dev/shm", &fs) == 0) {
    free_text = absl::StrCat(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize, " bytes free of ",
                             static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("shared-memory segment ", name, ": /dev/shm has no room for its ", bytes,
                   " bytes (", free_text,
                   "); make the batch, the image size or the ring depth smaller, or /dev/shm "
                   "larger (mount -o remount,size=... /dev/shm; docker run --shm-size=...)"));
}

}  // namespace

absl::Status ValidateSegmentName(absl::string_view name) {
  if (name.size() < 2 || name.size() > 251 || name[0] != '/' ||
      name.find('/', 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory segment name \"", name,
                     "\" must be \"/\" followed by 1 to 250 characters without \"/\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedMemorySegment> SharedMemorySegment::Create(const std::string& name,
                                                                size_t bytes) {
  if (absl::Status s = ValidateSegmentName(name); !s.ok()) return s;
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory segment ", name, ": size must be positive"));
  }
  UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    const int error = errno;
    if (error == EEXIST) {
      struct stat st;
      if (stat(absl::StrCat("/dev/shm", name).c_str(), &st) == 0 && st.st_uid != geteuid()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "shared-memory segment ", name, " already exists and belongs to uid ", st.st_uid,
            ", not to this user (uid ", geteuid(), "): use another job id"));
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "shared-memory segment ", name, " already exists (another service of the same job, ",
          "or a stale one: remove /dev/shm", name, ")"));
    }
    return ErrnoToStatus(error, absl::StrCat("shm_open(", name, ", O_CREAT|O_EXCL)"));
  }
  auto unlink_on_error = absl::MakeCleanup([&name] { shm_unlink(name.c_str()); });
  // shm_open applies the umask; make sure the segment is owner-only whatever it was.
  if (fchmod(fd.get(), 0600) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("fchmod(", name, ", 0600)"));
  }
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("ftruncate(", name, ", ", bytes, ")"));
  }
  // Note [A full /dev/shm].
  if (int error = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); error != 0) {
    if (error == ENOSPC) return NoRoomInDevShm(name, bytes);
    return ErrnoToStatus(error, absl::StrCat("posix_fallocate(", name, ", ", bytes, ")"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap(", name, ", ", bytes, " bytes)"));
  }
  std::move(unlink_on_error).Cancel();
  RegisterMapping(data, bytes, name);  // Note [Truncated shared memory]
  return SharedMemorySegment(name, data, bytes, /*owns_name=*/true);
}

absl::StatusOr<SharedMemorySegment> SharedMemorySegment::Open(const std::string& name) {
  if (absl::Status s = ValidateSegmentName(name); !s.ok()) return s;
  UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ")"));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat(", name, ")"));
  // Only a segment of this user that nobody else may open (the creator's 0600) is mapped: a
  // name in /dev/shm proves nothing about who made it.
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("shared-memory segment ", name, " belongs to uid ", st.st_uid,
                     ", not to this user (uid ", geteuid(), "): not mapped"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "shared-memory segment %s has mode %04o: other users may read or change it, so it "
        "is not mapped (Stoker creates its segments 0600)",
        name, static_cast<unsigned>(st.st_mode & 07777)));
  }
  if (st.st_size <= 0) {
    return absl::FailedPreconditionError(absl::StrCat("shared-memory segment ", name, " is empty"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap(", name, ", ", bytes, " bytes)"));
  }
  RegisterMapping(data, bytes, name);  // Note [Truncated shared memory]
  return SharedMemorySegment(name, data, bytes, /*owns_name=*/false);
}

SharedMemorySegment::SharedMemorySegment(SharedMemorySegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owns_name_(std::exchange(other.owns_name_, false)) {}

SharedMemorySegment& SharedMemorySegment::operator=(SharedMemorySegment&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

SharedMemorySegment::~SharedMemorySegment() { Reset(); }

absl::Status SharedMemorySegment::Unlink() {
  if (!owns_name_) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", name_, ": only its creator removes its name, once"));
  }
  owns_name_ = false;
  if (shm_unlink(name_.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("shm_unlink(", name_, ")"));
  }
  return absl::OkStatus();
}

absl::Status InstallTruncatedSharedMemoryGuard(int exit_code, absl::string_view who) {
  g_guard_exit_code.store(exit_code);
  auto copy = [](absl::string_view text, char* buffer, size_t capacity) {
    const size_t n = std::min(text.size(), capacity - 1);
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  };
  copy(who, g_guard_who, sizeof(g_guard_who));
  copy(ExitCause(exit_code), g_guard_cause, sizeof(g_guard_cause));
  struct sigaction action = {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGBUS, &action, nullptr) != 0) return ErrnoToStatus(errno, "sigaction(SIGBUS)");
  return absl::OkStatus();
}

void SharedMemorySegment::Reset() {
  if (data_ != nullptr) {
    UnregisterMapping(data_);
    munmap(data_, size_);
  }
  if (owns_name_) shm_unlink(name_.c_str());
  data_ = nullptr;
  size_ = 0;
  owns_name_ = false;
  name_.clear();
}

}  // namespace stoker
