#include "trainer/comm/collective_progress_table.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace stoker::trainer {
namespace {

constexpr int kMaxLocalRanks = 4096;

// `status` (from the shared-memory segment) with the table named in front, same code.
absl::Status AsTableError(const std::string& name, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("progress table /dev/shm", name, ": ", status.message()));
}

absl::Status ValidateName(const std::string& name) {
  if (absl::Status s = ValidateSegmentName(name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("progress table: ", s.message()));
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

RankProgress* Slots(void* data) {
  return reinterpret_cast<RankProgress*>(static_cast<char*>(data) + sizeof(ProgressTableHeader));
}

}  // namespace

size_t CollectiveProgressTable::BytesFor(int local_size) {
  return sizeof(ProgressTableHeader) + static_cast<size_t>(local_size) * sizeof(RankProgress);
}

absl::StatusOr<CollectiveProgressTable> CollectiveProgressTable::Create(const std::string& name,
                                                                        int local_size) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (absl::Status s = ValidateLocalSize(local_size); !s.ok()) return s;
  absl::StatusOr<SharedMemorySegment> segment =
      SharedMemorySegment::Create(name, BytesFor(local_size));
  if (absl::IsAlreadyExists(segment.status())) {
    return absl::AlreadyExistsError(
        absl::StrCat("progress table /dev/shm", name,
                     " already exists (another rank of this node made it, or a "
                     "job died while starting up: remove it if no job runs)"));
  }
  if (!segment.ok()) return AsTableError(name, segment.status());
  // The slots first, the header (with the magic) last: Open() checks the magic.
  void* data = segment->data();
  RankProgress* slots = Slots(data);
  for (int i = 0; i < local_size; ++i) new (&slots[i]) RankProgress();
  auto* header = new (data) ProgressTableHeader();
  header->local_size = local_size;
  header->version = ProgressTableHeader::kVersion;
  StoreRelease(&header->magic, ProgressTableHeader::kMagic);
  return CollectiveProgressTable(*std::move(segment));
}

absl::StatusOr<CollectiveProgressTable> CollectiveProgressTable::Open(const std::string& name,
                                                                      int local_size) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (absl::Status s = ValidateLocalSize(local_size); !s.ok()) return s;
  absl::StatusOr<SharedMemorySegment> segment = SharedMemorySegment::Open(name);
  if (!segment.ok()) return AsTableError(name, segment.status());
  const size_t bytes = BytesFor(local_size);
  if (segment->size() != bytes) {
    return absl::FailedPreconditionError(absl::StrCat("progress table /dev/shm", name, " has ",
                                                      segment->size(), " bytes; ", local_size,
                                                      " ranks need ", bytes));
  }
  CollectiveProgressTable table(*std::move(segment));
  const ProgressTableHeader* header = table.header();
  if (LoadAcquire(&header->magic) != ProgressTableHeader::kMagic ||
      header->version != ProgressTableHeader::kVersion || header->local_size != local_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("/dev/shm", name, " is not a version ", ProgressTableHeader::kVersion,
                     " progress table for ", local_size, " ranks"));
  }
  return table;
}

absl::Status CollectiveProgressTable::Unlink() {
  if (!segment_.owns_name()) {
    return absl::FailedPreconditionError(
        absl::StrCat("progress table ", name(), ": only its creator removes its name, once"));
  }
  if (absl::Status s = segment_.Unlink(); !s.ok()) return AsTableError(name(), s);
  return absl::OkStatus();
}

RankProgress& CollectiveProgressTable::slot(int local_rank) const {
  return Slots(segment_.data())[local_rank];
}

}  // namespace stoker::trainer
