#include "trainer/comm/grad_buckets.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/torch_element_type.h"
#include "common/torch_status.h"

namespace stoker::trainer {
namespace {

absl::StatusOr<ElementType> ElementTypeOf(const at::Tensor& t) {
  const std::optional<ElementType> type = FloatingElementType(t.scalar_type());
  if (!type.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradients of type ", at::toString(t.scalar_type()), " are not supported"));
  }
  return *type;
}

// Runs a callback after autograd has accumulated a parameter's gradient.
class AccumulatedHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit AccumulatedHook(std::function<void()> callback) : callback_(std::move(callback)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    callback_();
    return outputs;
  }

 private:
  std::function<void()> callback_;
};

}  // namespace

// The gradient accumulators carrying our hooks, kept alive (as c10d's reducer does) and
// unhooked on destruction.
struct GradBuckets::Hooks {
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> keys;
  ~Hooks() {
    for (size_t i = 0; i < accumulators.size(); ++i) accumulators[i]->del_post_hook(keys[i]);
  }
};

absl::StatusOr<std::unique_ptr<GradBuckets>> GradBuckets::Create(std::vector<at::Tensor> parameters,
                                                                 std::vector<std::string> names,
                                                                 size_t bucket_bytes,
                                                                 Communicator* communicator,
                                                                 bool fixed_addresses) {
  return TorchCall(
      "gradient buckets: creating the buckets",
      [&]() -> absl::StatusOr<std::unique_ptr<GradBuckets>> {
        if (parameters.empty()) return absl::InvalidArgumentError("the model has no parameters");
        if (names.size() != parameters.size()) {
          return absl::InvalidArgumentError("one name per parameter is needed");
        }
        const at::TensorOptions options = parameters[0].options().requires_grad(false);
        std::vector<int64_t> numels;
        for (size_t i = 0; i < parameters.size(); ++i) {
          if (parameters[i].scalar_type() != parameters[0].scalar_type() ||
              parameters[i].device() != parameters[0].device()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "parameter ", names[i], " differs in dtype or device from ", names[0]));
          }
          if (!parameters[i].requires_grad()) {
            return absl::InvalidArgumentError(
                absl::StrCat("parameter ", names[i], " does not require grad"));
          }
          numels.push_back(parameters[i].numel());
        }
        RETURN_IF_ERROR(ElementTypeOf(parameters[0]).status());
        std::vector<Bucket> plan = PlanBuckets(numels, parameters[0].element_size(), bucket_bytes);
        std::vector<at::Tensor> flat;
        // Note [One rank keeps autograd's gradients]: with nothing to reduce, buckets would only
        // cost a memset and an extra add kernel per parameter each step; autograd then simply
        // hands each parameter the gradient tensor it computed.
        const bool bucketed = communicator->world_size() > 1 || fixed_addresses;
        for (const Bucket& bucket : bucketed ? plan : std::vector<Bucket>()) {
          at::Tensor storage = at::zeros({bucket.numel}, options);
          for (const BucketSlot& slot : bucket.slots) {
            at::Tensor& p = parameters[slot.parameter];
            // A view with p's shape and strides (channels_last too): autograd accumulates into
            // it in place, element for element.
            at::Tensor slice = storage.narrow(0, slot.offset, slot.numel);
            p.mutable_grad() = p.is_non_overlapping_and_dense()
                                   ? slice.as_strided(p.sizes(), p.strides())
                                   : slice.view(p.sizes());
          }
          flat.push_back(std::move(storage));
        }
        std::unique_ptr<GradBuckets> buckets(new GradBuckets(std::move(parameters),
                                                             std::move(names), std::move(plan),
                                                             std::move(flat), communicator));
        buckets->hooks_ = std::make_unique<Hooks>();
        GradBuckets* self = buckets.get();
        for (size_t i = 0; i < self->parameters_.size(); ++i) {
          std::shared_ptr<torch::autograd::Node> accumulator =
              torch::autograd::impl::grad_accumulator(self->parameters_[i]);
          const int parameter = static_cast<int>(i);
          self->hooks_->keys.push_back(accumulator->add_post_hook(std::make_unique<AccumulatedHook>(
              [self, parameter] { self->OnGradientReady(parameter); })));
          self->hooks_->accumulators.push_back(std::move(accumulator));
        }
        return buckets;
      });
}

GradBuckets::GradBuckets(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                         std::vector<Bucket> plan, std::vector<at::Tensor> flat,
                         Communicator* communicator)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      plan_(std::move(plan)),
      flat_(std::move(flat)),
      bucket_of_(parameters_.size(), -1),
      pending_(plan_.size(), 0),
      ready_this_step_(parameters_.size(), 0),
      communicator_(communicator) {
  for (size_t b = 0; b < plan_.size(); ++b) {
    for (const BucketSlot& slot : plan_[b].slots) bucket_of_[slot.parameter] = static_cast<int>(b);
  }
}

GradBuckets::~GradBuckets() = default;

void GradBuckets::ZeroGrad() {
  if (flat_.empty()) {  // Note [One rank keeps autograd's gradients]
    for (at::Tensor& p : parameters_) p.mutable_grad() = at::Tensor();
    return;
  }
  for (at::Tensor& storage : flat_) storage.zero_();
}

void GradBuckets::set_trace(TraceRecorder* trace, int tid, DeviceTimeline* timeline,
                            int timeline_tid) {
  trace_ = trace;
  trace_tid_ = tid;
  timeline_ = timeline;
  timeline_tid_ = timeline_tid;
  communicator_->set_timeline(timeline);
}

void GradBuckets::BeginStep(bool reduce) {
  if (reduce) ++rounds_;
  reduce_ = reduce;
  armed_ = true;
  next_to_launch_ = 0;
  hook_status_ = absl::OkStatus();
  for (size_t b = 0; b < plan_.size(); ++b) pending_[b] = static_cast<int>(plan_[b].slots.size());
  std::fill(ready_this_step_.begin(), ready_this_step_.end(), 0);
}

absl::Status GradBuckets::Launch(int bucket) {
  // One rank: the mean of one is itself.
  if (flat_.empty() || communicator_->world_size() == 1) return absl::OkStatus();
  const BucketSlot& first = plan_[bucket].slots.front();
  const at::Tensor& grad = parameters_[first.parameter].grad();
  if (!grad.defined() || !grad.is_alias_of(flat_[bucket])) {
    return absl::FailedPreconditionError(
        absl::StrCat("the gradient of parameter ", names_[first.parameter],
                     " is no longer a view into its bucket (was zero_grad(set_to_none) called?)"));
  }
  ASSIGN_OR_RETURN(ElementType type, ElementTypeOf(flat_[bucket]));
  if (trace_ == nullptr || !trace_->recording()) {
    return communicator_->AllReduce(flat_[bucket].data_ptr(), flat_[bucket].numel(), type,
                                    ReduceOp::kAverage);
  }
  const int64_t issued = TraceNowMicros();
  const int64_t bytes = flat_[bucket].numel() * static_cast<int64_t>(ElementSize(type));
  auto args = [&] {
    return TraceArgs().Add("bucket", bucket).Add("bytes", bytes).Add("round", rounds_);
  };
  trace_->Instant(trace_tid_, absl::StrCat("bucket ", bucket, " issued"), "communication", issued,
                  args());
  if (timeline_ != nullptr) {
    timeline_->Label(timeline_tid_, absl::StrCat("bucket ", bucket, " all-reduce"),
                     args().Add("issued_us", issued));
  }
  absl::Status status = communicator_->AllReduce(flat_[bucket].data_ptr(), flat_[bucket].numel(),
                                                 type, ReduceOp::kAverage);
  trace_->Complete(trace_tid_, absl::StrCat("bucket ", bucket, " reduction"), "communication",
                   issued, TraceNowMicros(), args());
  return status;
}

void GradBuckets::OnGradientReady(int parameter) {
  if (!armed_ || ready_this_step_[parameter]) return;
  ready_this_step_[parameter] = 1;
  --pending_[bucket_of_[parameter]];
  if (!reduce_ || !hook_status_.ok()) return;
  // Launch in bucket order only, so that every rank issues the same collectives in the
  // same sequence whatever order its gradients arrive in.
  while (next_to_launch_ < static_cast<int>(plan_.size()) && pending_[next_to_launch_] == 0) {
    hook_status_ = TorchCall(absl::StrCat("gradient buckets: reducing bucket ", next_to_launch_),
                             [&] { return Launch(next_to_launch_); });
    if (!hook_status_.ok()) return;
    ++next_to_launch_;
  }
}

absl::Status GradBuckets::WatchReplay() {
  if (flat_.empty() || communicator_->world_size() == 1) return absl::OkStatus();
  return communicator_->WatchCurrentStream();
}

absl::Status GradBuckets::FinishStep() {
  armed_ = false;
  RETURN_IF_ERROR(hook_status_);
  std::vector<std::string> missing;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!ready_this_step_[i]) missing.push_back(names_[i]);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no gradient reached parameter(s) ", absl::StrJoin(missing, ", "),
                     " in this step; every parameter must take part in the loss"));
  }
  if (!reduce_ || communicator_->world_size() == 1) return absl::OkStatus();
  return communicator_->Synchronize();
}

}  // namespace stoker::trainer
