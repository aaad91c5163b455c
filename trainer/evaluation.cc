#include "trainer/evaluation.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/device.h"
#include "trainer/stop_vote.h"

namespace stoker::trainer {

std::vector<uint8_t> CountedInValidation(absl::Span<const int64_t> sample_indices,
                                         int64_t first_in_rank, int rank, int world_size) {
  std::vector<uint8_t> counted(sample_indices.size());
  for (size_t i = 0; i < sample_indices.size(); ++i) {
    const int64_t position = rank + (first_in_rank + static_cast<int64_t>(i)) * world_size;
    counted[i] = sample_indices[i] == position ? 1 : 0;
  }
  return counted;
}

ValidationTally::ValidationTally(at::Device device) : device_(device) {
  counts_ = at::zeros({3}, at::TensorOptions().device(device).dtype(at::kLong));
  loss_ = at::zeros({1}, at::TensorOptions().device(device).dtype(at::kDouble));
}

void ValidationTally::Add(const at::Tensor& logits, const at::Tensor& labels,
                          const std::vector<uint8_t>& counted) {
  c10::NoGradGuard no_grad;
  const int64_t n = logits.size(0);
  const at::Tensor mask =
      at::from_blob(const_cast<uint8_t*>(counted.data()), {n}, at::TensorOptions().dtype(at::kByte))
          .to(device_, at::kBool);
  const at::Tensor scores = logits.to(at::kFloat);
  const int64_t k = std::min<int64_t>(5, scores.size(1));
  const at::Tensor top = std::get<1>(scores.topk(k, /*dim=*/1));
  const at::Tensor hit = top.eq(labels.unsqueeze(1));
  const at::Tensor top1 = hit.select(1, 0).logical_and(mask);
  const at::Tensor topk = hit.any(1).logical_and(mask);
  counts_.add_(at::stack({mask.sum(), top1.sum(), topk.sum()}));
  const at::Tensor losses =
      at::cross_entropy_loss(scores, labels, /*weight=*/{}, at::Reduction::None);
  loss_.add_(losses.masked_select(mask).sum().to(at::kDouble));
}

absl::StatusOr<ValidationResult> ValidationTally::Reduce(Communicator& host_communicator) {
  return TorchCall("validation: reducing the tally", [&]() -> absl::StatusOr<ValidationResult> {
    at::Tensor counts = counts_.to(at::kCPU).contiguous();
    at::Tensor loss = loss_.to(at::kCPU).to(at::kFloat).contiguous();
    RETURN_IF_ERROR(
        host_communicator.AllReduce(counts.data_ptr(), 3, ElementType::kInt64, ReduceOp::kSum));
    RETURN_IF_ERROR(
        host_communicator.AllReduce(loss.data_ptr(), 1, ElementType::kFloat32, ReduceOp::kSum));
    RETURN_IF_ERROR(host_communicator.Synchronize());
    const int64_t* c = counts.data_ptr<int64_t>();
    ValidationResult result;
    result.samples = c[0];
    if (c[0] > 0) {
      result.top1 = static_cast<double>(c[1]) / c[0];
      result.top5 = static_cast<double>(c[2]) / c[0];
      result.loss = loss.item<float>() / c[0];
    }
    return result;
  });
}

absl::StatusOr<int> RunValidationPass(ImageClassifier& model, ValidationPass& pass, int64_t epoch,
                                      const RunContext& context, Communicator& host,
                                      ValidationResult* result) {
  model.eval();
  absl::Cleanup back_to_training = [&model] { model.train(); };
  ValidationTally tally(TrainingDevice(context));
  {
    c10::InferenceMode inference;
    for (int64_t s = 0; s < pass.batches; ++s) {
      absl::StatusOr<TrainingBatch> batch = pass.feeder->Next();
      if (batch.ok() && (batch->epoch != epoch || batch->step != s)) {
        return absl::InternalError(absl::StrCat("the validation ring delivered epoch ",
                                                batch->epoch, " step ", batch->step, ", expected ",
                                                epoch, " ", s));
      }
      ASSIGN_OR_RETURN(int stop, AgreeOnStop(host, batch.status()));
      if (stop != 0) return stop;
      if (batch->sample_indices.size() != static_cast<size_t>(batch->count)) {
        return absl::InternalError("a validation batch came without its sample indices");
      }
      RETURN_IF_ERROR(TorchCall("validation forward", [&] {
        at::Tensor logits = model.forward(batch->images);
        tally.Add(logits, batch->labels,
                  CountedInValidation(batch->sample_indices, s * pass.batch_size, context.rank.rank,
                                      context.world_size()));
      }));
    }
    if (at::autocast::is_autocast_enabled(at::kCUDA)) at::autocast::clear_cache();
  }
  pass.feeder.reset();
  ASSIGN_OR_RETURN(*result, tally.Reduce(host));
  return 0;
}

}  // namespace stoker::trainer
