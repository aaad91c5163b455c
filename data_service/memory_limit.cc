#include "data_service/memory_limit.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace stoker::data_service {
namespace {

std::string Gib(uint64_t bytes) { return absl::StrFormat("%.2f GiB", bytes / 1073741824.0); }

}  // namespace

absl::StatusOr<MaxMemory> ParseMaxMemory(absl::string_view text) {
  MaxMemory max;
  if (text == "auto") return max;
  if (text == "none") {
    max.kind = MaxMemory::Kind::kNone;
    return max;
  }
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_memory=", text, ": use auto, none or a size in bytes (e.g. 8G, 512MiB)"));
  };
  absl::string_view number = text;
  uint64_t scale = 1;
  if (!absl::ConsumeSuffix(&number, "iB")) absl::ConsumeSuffix(&number, "B");
  if (!number.empty()) {
    const char suffix = absl::ascii_toupper(number.back());
    const char* const suffixes = "KMGT";
    if (const char* at = std::strchr(suffixes, suffix); at != nullptr && suffix != '\0') {
      scale = uint64_t{1} << (10 * (at - suffixes + 1));
      number.remove_suffix(1);
    }
  }
  uint64_t value = 0;
  if (number.empty() || !absl::SimpleAtoi(number, &value) || value == 0 ||
      value > UINT64_MAX / scale) {
    return bad();
  }
  max.kind = MaxMemory::Kind::kBytes;
  max.bytes = value * scale;
  return max;
}

absl::StatusOr<uint64_t> AddressSpaceInUse() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat("open /proc/self/statm: ", std::strerror(errno)));
  }
  unsigned long long pages = 0;
  const int got = std::fscanf(f, "%llu", &pages);
  std::fclose(f);
  if (got != 1) return absl::InternalError("cannot read /proc/self/statm");
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

absl::StatusOr<std::unique_ptr<MemoryLimit>> MemoryLimit::Install(const MaxMemory& requested,
                                                                  int decode_threads) {
  MaxMemory max = requested;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // A sanitizer's shadow memory and quarantine take address space the budget does not
  // know of; instrumented builds run without the automatic limit.
  if (max.kind == MaxMemory::Kind::kAuto) max.kind = MaxMemory::Kind::kNone;
#endif
  absl::StatusOr<uint64_t> in_use = AddressSpaceInUse();
  if (!in_use.ok()) return in_use.status();
  if (max.kind == MaxMemory::Kind::kBytes && max.bytes < *in_use + kMemoryMargin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_memory=", max.bytes, ": the data service already uses ", Gib(*in_use),
        " of address space and needs ", Gib(kMemoryMargin), " more to run; give it at least ",
        Gib(*in_use + kMemoryMargin), " plus the rings"));
  }
  std::unique_ptr<MemoryLimit> limit(new MemoryLimit(max, decode_threads, *in_use));
  absl::MutexLock lock(&limit->mu_);
  if (absl::Status s = limit->ApplyLocked(); !s.ok()) return s;
  return limit;
}

uint64_t MemoryLimit::WantedLocked() {
  switch (max_.kind) {
    case MaxMemory::Kind::kNone:
      return 0;
    case MaxMemory::Kind::kBytes:
      return max_.bytes;
    case MaxMemory::Kind::kAuto:
      break;
  }
  return in_use_at_start_ + static_cast<uint64_t>(decode_threads_) * kDecodeThreadBudget +
         kMemoryMargin + ring_bytes_;
}

absl::Status MemoryLimit::ApplyLocked() {
  const uint64_t wanted = WantedLocked();
  if (wanted == 0 || wanted == applied_) return absl::OkStatus();
  rlimit current;
  if (getrlimit(RLIMIT_AS, &current) != 0) {
    return absl::InternalError(absl::StrCat("getrlimit(RLIMIT_AS): ", std::strerror(errno)));
  }
  rlimit next = current;
  next.rlim_cur =
      current.rlim_max == RLIM_INFINITY ? wanted : std::min<rlim_t>(wanted, current.rlim_max);
  if (setrlimit(RLIMIT_AS, &next) != 0) {
    return absl::InternalError(absl::StrCat("setrlimit(RLIMIT_AS, ", wanted,
                                            ") for --max_memory: ", std::strerror(errno)));
  }
  applied_ = next.rlim_cur;
  return absl::OkStatus();
}

absl::Status MemoryLimit::AddRing(absl::string_view name, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (max_.kind == MaxMemory::Kind::kBytes &&
      in_use_at_start_ + kMemoryMargin + ring_bytes_ + bytes > max_.bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "ring ", name, " needs ", Gib(bytes), " but the data service's --max_memory=", max_.bytes,
        " (", Gib(max_.bytes), ") leaves no room for it: ", Gib(ring_bytes_),
        " of rings are mapped and ", Gib(in_use_at_start_ + kMemoryMargin),
        " are kept for the service itself; raise --max_memory or use --max_memory=auto"));
  }
  ring_bytes_ += bytes;
  if (absl::Status s = ApplyLocked(); !s.ok()) {
    ring_bytes_ -= bytes;
    return s;
  }
  return absl::OkStatus();
}

void MemoryLimit::RemoveRing(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  ring_bytes_ -= std::min(bytes, ring_bytes_);
  (void)ApplyLocked();  // lowering a soft limit cannot fail
}

uint64_t MemoryLimit::limit_bytes() {
  absl::MutexLock lock(&mu_);
  return applied_;
}

std::string MemoryLimit::Describe() {
  absl::MutexLock lock(&mu_);
  switch (max_.kind) {
    case MaxMemory::Kind::kNone:
      return "--max_memory=none: no memory limit";
    case MaxMemory::Kind::kBytes:
      return absl::StrCat("--max_memory=", Gib(applied_), " of address space");
    case MaxMemory::Kind::kAuto:
      break;
  }
  return absl::StrCat("--max_memory=auto: ", Gib(applied_), " of address space now (",
                      Gib(in_use_at_start_), " at start + ", decode_threads_, " decode threads x ",
                      Gib(kDecodeThreadBudget), " + margin ", Gib(kMemoryMargin), " + rings ",
                      Gib(ring_bytes_), "; each ring adds its size)");
}

}  // namespace stoker::data_service
