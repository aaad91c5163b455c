#include "trainer/grad_buckets.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace stoker::trainer {
namespace {

absl::StatusOr<ElementType> ElementTypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return ElementType::kFloat32;
    case at::kHalf:
      return ElementType::kFloat16;
    case at::kBFloat16:
      return ElementType::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("gradients of type ", at::toString(t.scalar_type()), " are not supported"));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GradBuckets>> GradBuckets::Create(
    std::vector<at::Tensor> parameters, std::vector<std::string> names, size_t bucket_bytes,
    Communicator* communicator) {
  if (parameters.empty()) return absl::InvalidArgumentError("the model has no parameters");
  if (names.size() != parameters.size()) {
    return absl::InvalidArgumentError("one name per parameter is needed");
  }
  const at::TensorOptions options = parameters[0].options().requires_grad(false);
  std::vector<int64_t> numels;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].scalar_type() != parameters[0].scalar_type() ||
        parameters[i].device() != parameters[0].device()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", names[i], " differs in dtype or device from ", names[0]));
    }
    numels.push_back(parameters[i].numel());
  }
  RETURN_IF_ERROR(ElementTypeOf(parameters[0]).status());
  std::vector<Bucket> plan = PlanBuckets(numels, parameters[0].element_size(), bucket_bytes);
  std::vector<at::Tensor> flat;
  for (const Bucket& bucket : plan) {
    at::Tensor storage = at::zeros({bucket.numel}, options);
    for (const BucketSlot& slot : bucket.slots) {
      at::Tensor& p = parameters[slot.parameter];
      // The view keeps p's shape and memory format so autograd accumulates into it in place.
      p.mutable_grad() = storage.narrow(0, slot.offset, slot.numel).view(p.sizes());
    }
    flat.push_back(std::move(storage));
  }
  return std::unique_ptr<GradBuckets>(new GradBuckets(
      std::move(parameters), std::move(names), std::move(plan), std::move(flat), communicator));
}

GradBuckets::GradBuckets(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                         std::vector<Bucket> plan, std::vector<at::Tensor> flat,
                         Communicator* communicator)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      plan_(std::move(plan)),
      flat_(std::move(flat)),
      communicator_(communicator) {}

void GradBuckets::ZeroGrad() {
  for (at::Tensor& storage : flat_) storage.zero_();
}

absl::Status GradBuckets::CheckViewsAttached() const {
  for (size_t b = 0; b < plan_.size(); ++b) {
    for (const BucketSlot& slot : plan_[b].slots) {
      const at::Tensor& grad = parameters_[slot.parameter].grad();
      const char* expected =
          static_cast<const char*>(flat_[b].data_ptr()) + slot.offset * flat_[b].element_size();
      if (!grad.defined() || grad.data_ptr() != expected) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the gradient of parameter ", names_[slot.parameter],
            " is no longer a view into its bucket (was zero_grad(set_to_none) called?)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GradBuckets::AllReduceAverage() {
  RETURN_IF_ERROR(CheckViewsAttached());
  const int world = communicator_->world_size();
  for (at::Tensor& storage : flat_) {
    ASSIGN_OR_RETURN(ElementType type, ElementTypeOf(storage));
    RETURN_IF_ERROR(communicator_->AllReduceSum(storage.data_ptr(), storage.numel(), type));
    if (world > 1) storage.div_(world);
  }
  return communicator_->Synchronize();
}

}  // namespace stoker::trainer
