#include "trainer/graph/buffer_plan.h"

#include <c10/core/GradMode.h>

namespace stoker::trainer {

int BufferPlan::SlotOf(const std::string& name) {
  auto [it, inserted] = slot_of_.emplace(name, static_cast<int>(values_.size()));
  if (inserted) {
    values_.emplace_back();
    persistent_.push_back(false);
  }
  return it->second;
}

int BufferPlan::FindSlot(const std::string& name) const {
  auto it = slot_of_.find(name);
  return it == slot_of_.end() ? -1 : it->second;
}

int BufferPlan::BindWeight(const std::string& name, const at::Tensor& tensor, bool is_buffer) {
  const int slot = SlotOf(name);
  values_[slot] = tensor;
  persistent_[slot] = true;
  if (is_buffer) buffer_slots_.insert(slot);
  return slot;
}

bool BufferPlan::SetOutput(const std::string& name) {
  output_slot_ = FindSlot(name);
  return output_slot_ >= 0;
}

void BufferPlan::AddBufferMutation(const std::string& name, const at::Tensor& buffer) {
  buffer_mutations_.emplace_back(SlotOf(name), buffer);
}

std::vector<int> BufferPlan::OutsideReads() const {
  std::vector<int> reads = {output_slot_};
  for (const auto& [slot, buffer] : buffer_mutations_) reads.push_back(slot);
  return reads;
}

void BufferPlan::ApplyBufferMutations() {
  if (buffer_mutations_.empty()) return;
  c10::NoGradGuard no_grad;
  for (auto& [slot, buffer] : buffer_mutations_) buffer.copy_(values_[slot].toTensor());
}

void BufferPlan::ClearRunValues() {
  for (size_t i = 0; i < values_.size(); ++i) {
    if (!persistent_[i]) values_[i] = c10::IValue();
  }
}

}  // namespace stoker::trainer
