#include "trainer/nn/fp8_state.h"

#include <ATen/ATen.h>

#include <utility>

namespace stoker::trainer {

Fp8LinearState::Fp8LinearState(Fp8Recipe recipe, std::string name)
    : recipe_(recipe), name_(std::move(name)) {
  TORCH_CHECK(recipe_.history >= 1 && recipe_.history <= 1024,
              "an FP8 amax history holds 1 to 1024 values, not ", recipe_.history);
  TORCH_CHECK(recipe_.margin >= 0, "an FP8 scaling margin is >= 0, not ", recipe_.margin);
}

std::vector<int64_t> Fp8LinearState::ScalingSizes(const Fp8Recipe& recipe) {
  return {kFp8Roles, recipe.history + 3};
}

void Fp8LinearState::PlaceOn(const torch::Device& device) {
  if (scaling_.defined()) {
    if (scaling_.device() != device) scaling_ = scaling_.to(device);
    return;
  }
  const int h = recipe_.history;
  scaling_ = at::zeros(ScalingSizes(recipe_), at::TensorOptions().dtype(at::kFloat).device(device));
  scaling_.select(1, h + 1).fill_(1.0);  // scale
  scaling_.select(1, h + 2).fill_(1.0);  // its inverse
}

torch::Tensor& Fp8LinearState::DeviceState(const torch::Device& device) {
  if (!scaling_.defined()) PlaceOn(device);
  TORCH_CHECK(scaling_.device() == device, "an FP8 linear layer's scaling state is on ",
              scaling_.device(), ", its call on ", device);
  return scaling_;
}

torch::Tensor Fp8LinearState::scale(Fp8Role role) const {
  if (!scaling_.defined()) return {};
  return scaling_.select(0, static_cast<int>(role)).select(0, recipe_.history + 1);
}

torch::Tensor Fp8LinearState::amax_history(Fp8Role role) const {
  if (!scaling_.defined()) return {};
  return scaling_.select(0, static_cast<int>(role)).slice(0, 0, recipe_.history);
}

}  // namespace stoker::trainer
