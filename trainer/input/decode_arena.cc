#include "trainer/input/decode_arena.h"

#include "absl/strings/str_cat.h"

namespace stoker::trainer {

absl::StatusOr<std::vector<DecodeRound>> PlanDecodeRounds(absl::Span<const uint64_t> decoded_bytes,
                                                          uint64_t arena_bytes) {
  std::vector<DecodeRound> rounds;
  for (size_t i = 0; i < decoded_bytes.size(); ++i) {
    const uint64_t bytes = decoded_bytes[i];
    if (bytes > arena_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("deferred image ", i, " decodes to ", bytes,
                                                     " bytes, more than the GPU decode arena's ",
                                                     arena_bytes));
    }
    if (rounds.empty() || rounds.back().bytes + bytes > arena_bytes) {
      rounds.push_back(DecodeRound{i, 0, 0});
    }
    ++rounds.back().count;
    rounds.back().bytes += bytes;
  }
  return rounds;
}

}  // namespace stoker::trainer
