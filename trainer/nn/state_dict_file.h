// Reading a state dict that Python wrote, to start a model from it (--init_weights): a
// safetensors file or, when the run trusts it (--allow_pickle), the
// `torch.save(model.state_dict(), path)` zip format; and loading it into a module with the
// rules of Python's `load_state_dict(strict=True)`. The file is untrusted: Note [Untrusted
// model files] (trainer/nn/model_file.h).
#ifndef STOKER_TRAINER_NN_STATE_DICT_FILE_H_
#define STOKER_TRAINER_NN_STATE_DICT_FILE_H_

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stoker::trainer {

// Note [Pickled state dicts]
// torch.save's format is a zip whose data.pkl is a Python pickle. Python's torch.load
// narrowed what it unpickles (weights_only=True), but libtorch's C++ unpickler
// (torch::pickle_load) has no such mode: it follows the pickle's opcodes wherever they
// lead, and has a record of memory-safety faults on crafted input, in code Stoker cannot
// instrument or fix. So a torch.save file is read only when the run opts in with
// --allow_pickle (a file the user made or trusts, such as Stoker's own --export); else it is
// refused, naming the one-line conversion to safetensors, whose reader here is Stoker's own
// and checked field by field.

struct StateDictFileOptions {
  // Read torch.save's pickle format too: Note [Pickled state dicts].
  bool allow_pickle = false;
};

// The largest safetensors JSON header read (100 MB, as the safetensors reference reader).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// The {name: tensor} dict in `path` (CPU tensors): a safetensors file (told by its header,
// whatever the file's name) or, with options.allow_pickle, torch.save's zip format of a dict
// of tensors. Errors name "--init_weights=<path>"; ReadModelFile's (model_file.h) for a file
// that cannot be read, else ParseStateDictFile's.
absl::StatusOr<std::map<std::string, at::Tensor>> ReadStateDictFile(
    const std::string& path, const StateDictFileOptions& options = {});

// The dict in `bytes`, the content of the file `path`. InvalidArgument tagged kExitUsage
// naming the file, and the tensor and field at fault, when it is neither format; a
// safetensors file whose header is not JSON, has a duplicate key, an unknown dtype, a shape
// that is not a list of sizes >= 0, offsets that are not two sizes, do not fit the shape, lie
// past the end, overlap or leave a gap; a torch.save file without options.allow_pickle, or
// one that libtorch cannot read or that holds anything but {name: tensor}.
absl::StatusOr<std::map<std::string, at::Tensor>> ParseStateDictFile(
    const std::string& path, const std::string& bytes, const StateDictFileOptions& options = {});

// Copies `state` into `module`'s parameters and buffers (StateDictItems names), converting
// dtypes as torch's copy_ does. As load_state_dict(strict=True): InvalidArgument naming the
// missing and unexpected keys, or a key whose shape differs; the module is left unchanged
// when it fails. Not thread-safe with a running forward.
absl::Status LoadStateDict(const std::map<std::string, at::Tensor>& state,
                           torch::nn::Module& module, const std::string& source);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_STATE_DICT_FILE_H_
