// Validation: top-1 and top-5 accuracy and mean loss over the validation split, each sample
// counted exactly once over all ranks. DistributedSampler pads the split by wrap-around to
// a multiple of the world size, so some ranks see a few samples twice; with no shuffle
// (the validation split) the sample at global position p has index p for p < n and index
// p - n for the padding, so a sample counts iff its index equals its position.
#ifndef STOKER_TRAINER_EVALUATION_H_
#define STOKER_TRAINER_EVALUATION_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "trainer/comm/communicator.h"
#include "trainer/nn/image_classifier.h"
#include "trainer/run_context.h"
#include "trainer/run_input.h"

namespace stoker::trainer {

// For each sample of a rank's validation batch: 1 if it counts, 0 for a padding duplicate.
// `first_in_rank` is the batch's first sample's position among this rank's samples
// (step * batch_size); the sample's position in the global order is
// rank + (first_in_rank + i) * world_size.
std::vector<uint8_t> CountedInValidation(absl::Span<const int64_t> sample_indices,
                                         int64_t first_in_rank, int rank, int world_size);

struct ValidationResult {
  int64_t samples = 0;  // counted over all ranks
  double top1 = 0;      // accuracy in [0, 1]
  double top5 = 0;      // top-min(5, classes)
  double loss = 0;      // mean cross-entropy (no label smoothing)
};

// Running sums on the device: no host synchronisation until Reduce. Owned by the training
// thread.
class ValidationTally {
 public:
  explicit ValidationTally(at::Device device);

  // Adds one batch: `logits` [n, classes] (any float dtype), `labels` int64 [n], `counted`
  // one byte per sample (CountedInValidation).
  void Add(const at::Tensor& logits, const at::Tensor& labels, const std::vector<uint8_t>& counted);

  // Sums over all ranks with `host_communicator` (a communicator on host memory) and
  // returns the result. Syncs with the device. Must be called in the same order on every
  // rank.
  absl::StatusOr<ValidationResult> Reduce(Communicator& host_communicator);

 private:
  at::Device device_;
  at::Tensor counts_;  // int64 [3]: samples, top-1 correct, top-k correct
  at::Tensor loss_;    // float64 [1]: summed loss
};

// One validation pass of `model` (eval mode, without autograd; under the caller's autocast
// setting) over `pass`'s batches, each sample counted once, summed over all ranks through
// `host`. The ranks vote at every batch (Note [Stopping together] in trainer/stop_vote.h):
// returns the agreed stop signal, or 0 with `result` filled. The model is back in training
// mode on return. Must be called in the same order on every rank.
absl::StatusOr<int> RunValidationPass(ImageClassifier& model, ValidationPass& pass, int64_t epoch,
                                      const RunContext& context, Communicator& host,
                                      ValidationResult* result);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_EVALUATION_H_
