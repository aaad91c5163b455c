#include "trainer/collective_progress_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/unique_fd.h"

namespace stoker::trainer {
namespace {

constexpr int kMaxLocalRanks = 4096;

absl::Status ValidateName(const std::string& name) {
  if (name.size() < 2 || name.size() > 251 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress table name \"", name, "\" must be \"/\" followed by 1 to 250 characters without \"/\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateLocalSize(int local_size) {
  if (local_size < 1 || local_size > kMaxLocalRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress table for ", local_size, " ranks: must be 1 to ", kMaxLocalRanks));
  }
  return absl::OkStatus();
}

}  // namespace

size_t CollectiveProgressTable::BytesFor(int local_size) {
  return sizeof(ProgressTableHeader) + static_cast<size_t>(local_size) * sizeof(RankProgress);
}

absl::StatusOr<CollectiveProgressTable> CollectiveProgressTable::Create(const std::string& name,
                                                                        int local_size) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (absl::Status s = ValidateLocalSize(local_size); !s.ok()) return s;
  UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    const int error = errno;
    if (error == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(
          "progress table /dev/shm", name, " already exists (another rank of this node made it, or a "
          "job died while starting up: remove it if no job runs)"));
    }
    return stoker::ErrnoToStatus(error, absl::StrCat("shm_open(", name, ", O_CREAT|O_EXCL)"));
  }
  auto unlink_on_error = absl::MakeCleanup([&name] { shm_unlink(name.c_str()); });
  if (fchmod(fd.get(), 0600) != 0) {
    return stoker::ErrnoToStatus(errno, absl::StrCat("fchmod(", name, ", 0600)"));
  }
  const size_t bytes = BytesFor(local_size);
  if (int error = posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); error != 0) {
    return stoker::ErrnoToStatus(error, absl::StrCat("posix_fallocate(", name, ", ", bytes, ")"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    return stoker::ErrnoToStatus(errno, absl::StrCat("mmap(", name, ", ", bytes, " bytes)"));
  }
  std::move(unlink_on_error).Cancel();
  // The slots first, the header (with the magic) last: Open() checks the magic.
  auto* slots = reinterpret_cast<RankProgress*>(static_cast<char*>(data) + sizeof(ProgressTableHeader));
  for (int i = 0; i < local_size; ++i) new (&slots[i]) RankProgress();
  auto* header = new (data) ProgressTableHeader();
  header->local_size = local_size;
  header->version = ProgressTableHeader::kVersion;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = ProgressTableHeader::kMagic;
  return CollectiveProgressTable(name, data, bytes, /*owns_name=*/true);
}

absl::StatusOr<CollectiveProgressTable> CollectiveProgressTable::Open(const std::string& name,
                                                                      int local_size) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (absl::Status s = ValidateLocalSize(local_size); !s.ok()) return s;
  UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd.valid()) return stoker::ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ")"));
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return stoker::ErrnoToStatus(errno, absl::StrCat("fstat(", name, ")"));
  }
  const size_t bytes = BytesFor(local_size);
  if (static_cast<size_t>(st.st_size) != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("progress table /dev/shm", name, " has ",
                                                      st.st_size, " bytes; ", local_size,
                                                      " ranks need ", bytes));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    return stoker::ErrnoToStatus(errno, absl::StrCat("mmap(", name, ", ", bytes, " bytes)"));
  }
  CollectiveProgressTable table(name, data, bytes, /*owns_name=*/false);
  const ProgressTableHeader* header = table.header();
  if (header->magic != ProgressTableHeader::kMagic ||
      header->version != ProgressTableHeader::kVersion || header->local_size != local_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "/dev/shm", name, " is not a version ", ProgressTableHeader::kVersion,
        " progress table for ", local_size, " ranks"));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return table;
}

CollectiveProgressTable::CollectiveProgressTable(CollectiveProgressTable&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owns_name_(std::exchange(other.owns_name_, false)) {}

CollectiveProgressTable& CollectiveProgressTable::operator=(CollectiveProgressTable&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

CollectiveProgressTable::~CollectiveProgressTable() { Reset(); }

void CollectiveProgressTable::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  if (owns_name_) shm_unlink(name_.c_str());
  data_ = nullptr;
  size_ = 0;
  owns_name_ = false;
}

absl::Status CollectiveProgressTable::Unlink() {
  if (!owns_name_) {
    return absl::FailedPreconditionError(
        absl::StrCat("progress table ", name_, ": only its creator removes its name, once"));
  }
  owns_name_ = false;
  if (shm_unlink(name_.c_str()) != 0) {
    return stoker::ErrnoToStatus(errno, absl::StrCat("shm_unlink(", name_, ")"));
  }
  return absl::OkStatus();
}

RankProgress& CollectiveProgressTable::slot(int local_rank) const {
  auto* slots = reinterpret_cast<RankProgress*>(static_cast<char*>(data_) + sizeof(ProgressTableHeader));
  return slots[local_rank];
}

}  // namespace stoker::trainer
