#include "trainer/evaluation.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "common/status_macros.h"
#include "common/torch_status.h"

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
  const at::Tensor losses = at::cross_entropy_loss(scores, labels, /*weight=*/{}, at::Reduction::None);
  loss_.add_(losses.masked_select(mask).sum().to(at::kDouble));
}

absl::StatusOr<ValidationResult> ValidationTally::Reduce(Communicator& host_communicator) {
  return TorchCall("validation: reducing the tally", [&]() -> absl::StatusOr<ValidationResult> {
    at::Tensor counts = counts_.to(at::kCPU).contiguous();
    at::Tensor loss = loss_.to(at::kCPU).to(at::kFloat).contiguous();
    RETURN_IF_ERROR(host_communicator.AllReduce(counts.data_ptr(), 3, ElementType::kInt64, ReduceOp::kSum));
    RETURN_IF_ERROR(host_communicator.AllReduce(loss.data_ptr(), 1, ElementType::kFloat32, ReduceOp::kSum));
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

}  // namespace stoker::trainer
