#include "trainer/nn/state_dict_file.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/serialize.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "nlohmann/json.hpp"
#include "trainer/nn/state_dict.h"

namespace stoker::trainer {
namespace {

absl::StatusOr<at::ScalarType> SafetensorsDtype(const std::string& name) {
  static const std::map<std::string, at::ScalarType> kTypes = {{"F64", at::kDouble},
                                                               {"F32", at::kFloat},
                                                               {"F16", at::kHalf},
                                                               {"BF16", at::kBFloat16},
                                                               {"I64", at::kLong},
                                                               {"I32", at::kInt},
                                                               {"I16", at::kShort},
                                                               {"I8", at::kChar},
                                                               {"U8", at::kByte},
                                                               {"BOOL", at::kBool},
                                                               {"U16", at::kUInt16},
                                                               {"U32", at::kUInt32},
                                                               {"U64", at::kUInt64},
                                                               {"F8_E4M3", at::kFloat8_e4m3fn},
                                                               {"F8_E5M2", at::kFloat8_e5m2}};
  auto it = kTypes.find(name);
  if (it == kTypes.end())
    return absl::InvalidArgumentError(absl::StrCat("unknown safetensors dtype ", name));
  return it->second;
}

// The safetensors layout: an 8-byte little-endian header length, the JSON header
// {name: {dtype, shape, data_offsets}}, then the data the offsets point into.
absl::StatusOr<std::map<std::string, at::Tensor>> ParseSafetensors(const std::string& path,
                                                                   const std::vector<char>& bytes) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--init_weights=", path, ": safetensors file: ", why));
  };
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  if (header_size > bytes.size() - 8)
    return bad("the header runs past the end of the file (truncated?)");
  const nlohmann::json header =
      nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_size,
                            /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("the header is not a JSON object");
  const char* data = bytes.data() + 8 + header_size;
  const uint64_t data_size = bytes.size() - 8 - header_size;
  std::map<std::string, at::Tensor> state;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      return bad(absl::StrCat(name, ": malformed entry"));
    }
    absl::StatusOr<at::ScalarType> dtype = SafetensorsDtype(entry["dtype"].get<std::string>());
    if (!dtype.ok()) return bad(absl::StrCat(name, ": ", dtype.status().message()));
    const std::vector<int64_t> shape = entry["shape"].get<std::vector<int64_t>>();
    const std::vector<uint64_t> offsets = entry["data_offsets"].get<std::vector<uint64_t>>();
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size ||
        offsets[1] - offsets[0] != static_cast<uint64_t>(numel) * c10::elementSize(*dtype)) {
      return bad(absl::StrCat(name, ": its data offsets do not fit its shape or the file"));
    }
    state[name] = at::empty(shape, at::TensorOptions().dtype(*dtype));
    std::memcpy(state[name].data_ptr(), data + offsets[0], offsets[1] - offsets[0]);
  }
  return state;
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> ReadStateDictFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(
        absl::StrCat("--init_weights=", path, ": cannot open the file"));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0) {
    return TorchCall(
        absl::StrCat("--init_weights=", path, ": reading torch.save's format"),
        [&]() -> absl::StatusOr<std::map<std::string, at::Tensor>> {
          const c10::IValue loaded = torch::pickle_load(bytes);
          if (!loaded.isGenericDict()) {
            return absl::InvalidArgumentError(absl::StrCat("--init_weights=", path, ": holds a ",
                                                           loaded.tagKind(), ", not a state dict"));
          }
          std::map<std::string, at::Tensor> state;
          for (const auto& item : loaded.toGenericDict()) {
            if (!item.key().isString() || !item.value().isTensor()) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "--init_weights=", path, ": not a state dict (an entry is not name -> tensor)"));
            }
            state[item.key().toStringRef()] = item.value().toTensor();
          }
          return state;
        });
  }
  if (bytes.size() >= 10 && bytes[8] == '{') return ParseSafetensors(path, bytes);
  return absl::InvalidArgumentError(absl::StrCat(
      "--init_weights=", path, ": neither torch.save's zip format nor a safetensors file"));
}

absl::Status LoadStateDict(const std::map<std::string, at::Tensor>& state,
                           torch::nn::Module& module, const std::string& source) {
  std::vector<std::pair<std::string, torch::Tensor>> items = StateDictItems(module);
  std::vector<std::string> missing, unexpected, mismatched;
  std::map<std::string, bool> known;
  for (const auto& [name, tensor] : items) {
    known[name] = true;
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (it->second.sizes() != tensor.sizes()) {
      mismatched.push_back(absl::StrCat(name, " (", c10::str(it->second.sizes()), " in the file, ",
                                        c10::str(tensor.sizes()), " in the model)"));
    }
  }
  for (const auto& [name, tensor] : state) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string message = absl::StrCat(source, ": the state dict does not fit the model:");
    if (!missing.empty())
      absl::StrAppend(&message, " missing keys ", absl::StrJoin(missing, ", "), ";");
    if (!unexpected.empty())
      absl::StrAppend(&message, " unexpected keys ", absl::StrJoin(unexpected, ", "), ";");
    if (!mismatched.empty())
      absl::StrAppend(&message, " other shapes ", absl::StrJoin(mismatched, ", "), ";");
    message.pop_back();
    return absl::InvalidArgumentError(message);
  }
  return TorchCall(absl::StrCat(source, ": copying the weights"), [&] {
    c10::NoGradGuard no_grad;
    for (auto& [name, tensor] : items) tensor.copy_(state.at(name));
  });
}

}  // namespace stoker::trainer
