// Python-ordered state dicts and their pickle (see state_dict.h).
#include "trainer/nn/state_dict.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace stoker::trainer {
namespace {

void AppendStateDict(const torch::nn::Module& module, const std::string& prefix,
                     std::vector<std::pair<std::string, torch::Tensor>>& items) {
  for (const auto& parameter : module.named_parameters(/*recurse=*/false)) {
    if (parameter.value().defined()) items.emplace_back(prefix + parameter.key(), parameter.value());
  }
  for (const auto& buffer : module.named_buffers(/*recurse=*/false)) {
    if (buffer.value().defined()) items.emplace_back(prefix + buffer.key(), buffer.value());
  }
  for (const auto& child : module.named_children()) {
    AppendStateDict(*child.value(), absl::StrCat(prefix, child.key(), "."), items);
  }
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> StateDictItems(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> items;
  AppendStateDict(module, "", items);
  return items;
}

absl::StatusOr<std::string> PickleStateDict(const torch::nn::Module& module) {
  try {
    c10::Dict<std::string, at::Tensor> dict;
    for (const auto& [name, tensor] : StateDictItems(module)) {
      dict.insert(name, tensor.detach().to(at::kCPU));
    }
    const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
    return std::string(bytes.begin(), bytes.end());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("PickleStateDict: libtorch failed: ", e.what_without_backtrace()));
  }
}

}  // namespace stoker::trainer
