// PyTorch's state dict from C++: a module's parameters and buffers with the names and in the
// order Python's `Module.state_dict()` gives them, and a pickle of it that `torch.load` reads.
#ifndef STOKER_TRAINER_NN_STATE_DICT_H_
#define STOKER_TRAINER_NN_STATE_DICT_H_

#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace stoker::trainer {

// The state dict of `module`, ordered as Python's `Module.state_dict()`: submodules in
// pre-order (registration order), and for each one its own parameters, then its own
// buffers, under dotted names ("layer1.0.bn1.running_mean"). Undefined tensors (a conv's
// absent bias) are left out, as Python leaves out None. The tensors alias the module's.
// libtorch's own `named_parameters()` followed by `named_buffers()` lists all parameters
// before any buffer, which is not Python's order. Thread-compatible.
std::vector<std::pair<std::string, torch::Tensor>> StateDictItems(const torch::nn::Module& module);

// StateDictItems(module), detached and copied to the CPU, serialised as an ordered
// {name: tensor} dict in `torch.save`'s zip format, so that Python's `torch.load(path)`
// (weights_only=True, the default) returns it and
// `torchvision_model.load_state_dict(torch.load(path))` works. Internal if libtorch fails.
// Not a checkpoint writer: the caller writes the bytes (atomically, if it needs to).
// Synchronises with the device of any GPU tensor.
absl::StatusOr<std::string> PickleStateDict(const torch::nn::Module& module);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_STATE_DICT_H_
