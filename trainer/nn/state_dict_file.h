// Reading a state dict that Python wrote, to start a model from it (--init_weights): the
// `torch.save(model.state_dict(), path)` zip format or a safetensors file, and loading it
// into a module with the rules of Python's `load_state_dict(strict=True)`.
#ifndef STOKER_TRAINER_NN_STATE_DICT_FILE_H_
#define STOKER_TRAINER_NN_STATE_DICT_FILE_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::trainer {

// The {name: tensor} dict in `path` (CPU tensors): a safetensors file (told by its header,
// whatever the file's name) or torch.save's zip format of a dict of tensors.
// InvalidArgument naming the file when it is neither, or holds something else than tensors.
absl::StatusOr<std::map<std::string, at::Tensor>> ReadStateDictFile(const std::string& path);

// Copies `state` into `module`'s parameters and buffers (StateDictItems names), converting
// dtypes as torch's copy_ does. As load_state_dict(strict=True): InvalidArgument naming the
// missing and unexpected keys, or a key whose shape differs; the module is left unchanged
// when it fails. Not thread-safe with a running forward.
absl::Status LoadStateDict(const std::map<std::string, at::Tensor>& state,
                           torch::nn::Module& module, const std::string& source);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_STATE_DICT_FILE_H_
