#include "common/testing/unique_name.h"

#include <atomic>
#include <cstdint>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace stoker::testing {

std::string UniqueName(absl::string_view prefix) {
  static const std::string* const kProcessId = [] {
    std::random_device device;
    const uint64_t value = (static_cast<uint64_t>(device()) << 32) | device();
    return new std::string(absl::StrFormat("%016x", value));
  }();
  static std::atomic<int64_t> counter{0};
  return absl::StrCat(prefix, ".", *kProcessId, ".", counter++);
}

}  // namespace stoker::testing
