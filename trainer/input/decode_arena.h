// The bound on the GPU decode arena (Note [The GPU decode arena] in
// data_service/image/deferred_jpeg.h): how a batch's deferred JPEGs are split into decode
// rounds that each fit it.
#ifndef STOKER_TRAINER_INPUT_DECODE_ARENA_H_
#define STOKER_TRAINER_INPUT_DECODE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace stoker::trainer {

// Images [first, first + count) of a batch's deferred JPEGs, decoded together into the
// arena: `bytes` of it, from offset 0.
struct DecodeRound {
  size_t first = 0;
  size_t count = 0;
  uint64_t bytes = 0;
};

// Splits images whose decodes take `decoded_bytes` (in batch order) into consecutive
// rounds, as few as greedy filling gives, each taking at most `arena_bytes`. InvalidArgument
// for an image larger than the arena alone (the ring client refuses a slot with one).
absl::StatusOr<std::vector<DecodeRound>> PlanDecodeRounds(absl::Span<const uint64_t> decoded_bytes,
                                                          uint64_t arena_bytes);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_INPUT_DECODE_ARENA_H_
