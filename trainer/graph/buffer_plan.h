// BufferPlan: where a GraphProgram keeps its values. Every named value of the graph (a
// parameter, a buffer, the image input, a node's output, a symbolic size) has one slot of
// the program's value table, given the first time the name is seen. Slots bound to the
// model's parameters and buffers persist across runs; every other slot holds its value
// from the call that writes it to the end of the run, when the table lets it go.
#ifndef STOKER_TRAINER_GRAPH_BUFFER_PLAN_H_
#define STOKER_TRAINER_GRAPH_BUFFER_PLAN_H_

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stoker::trainer {

// Filled while a program is built (slots are numbered in the order names are first seen),
// then read and written by its runs. Thread-compatible.
//
//   BufferPlan plan;
//   plan.BindWeight("p_conv_weight", conv_weight, /*is_buffer=*/false);
//   plan.SetInput("x");
//   int out = plan.SlotOf("conv2d");  // a node's output
class BufferPlan {
 public:
  // The slot of the value `name`; a new, empty one the first time `name` is seen.
  int SlotOf(const std::string& name);
  // The slot of `name`, or -1 when it has none.
  int FindSlot(const std::string& name) const;

  // Binds the value `name` to the model's `tensor` (the same TensorImpl), kept across runs.
  // A buffer's slot is one `HoldsBuffer` knows.
  int BindWeight(const std::string& name, const at::Tensor& tensor, bool is_buffer);
  // Whether `slot` is bound to one of the model's buffers.
  bool HoldsBuffer(int slot) const { return buffer_slots_.count(slot) > 0; }

  // The value `name` is the image batch of a run.
  void SetInput(const std::string& name) { input_slot_ = SlotOf(name); }
  // The value `name` is the run's result. False when no input or call names it.
  bool SetOutput(const std::string& name);
  // After a run, `buffer` (a bound buffer) is updated to the value `name`.
  void AddBufferMutation(const std::string& name, const at::Tensor& buffer);

  int input_slot() const { return input_slot_; }
  int output_slot() const { return output_slot_; }
  // The slots read other than by the program's calls: the output, then the values the
  // buffers are updated to.
  std::vector<int> OutsideReads() const;

  // The value table, by slot.
  std::vector<c10::IValue>& values() { return values_; }
  const std::vector<c10::IValue>& values() const { return values_; }
  // Copies the buffer mutations' values into their buffers (without autograd).
  void ApplyBufferMutations();
  // Lets go of every value but the bound parameters and buffers.
  void ClearRunValues();

 private:
  std::unordered_map<std::string, int> slot_of_;
  std::vector<c10::IValue> values_;  // one slot per named graph value
  std::vector<bool> persistent_;     // slot holds a parameter or buffer
  std::set<int> buffer_slots_;
  int input_slot_ = -1;
  int output_slot_ = -1;
  std::vector<std::pair<int, at::Tensor>> buffer_mutations_;  // slot -> buffer it updates
};

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_BUFFER_PLAN_H_
