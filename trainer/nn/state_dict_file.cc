#include "trainer/nn/state_dict_file.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "nlohmann/json.hpp"
#include "trainer/nn/model_file.h"
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

constexpr char kFlag[] = "--init_weights";

// The keys of every object of a JSON text, checked for duplicates as it is parsed (JSON
// allows them; nlohmann keeps the last, so a reviewer and the loader could read different
// tensors). Pass Callback() to json::parse, then read duplicate().
class DuplicateKeys {
 public:
  nlohmann::json::parser_callback_t Callback() {
    return [this](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      using Event = nlohmann::json::parse_event_t;
      if (event == Event::object_start) {
        open_.emplace_back();
      } else if (event == Event::object_end && !open_.empty()) {
        open_.pop_back();
      } else if (event == Event::key && !open_.empty() && parsed.is_string()) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_.back().insert(key).second && duplicate_.empty()) duplicate_ = key;
      }
      return true;
    };
  }
  // The first key seen twice in one object; empty when none was.
  const std::string& duplicate() const { return duplicate_; }

 private:
  std::vector<std::set<std::string>> open_;  // the keys of each object being parsed
  std::string duplicate_;
};

// A JSON value that is an integer >= 0, as uint64_t.
bool AsSize(const nlohmann::json& value, uint64_t* size) {
  if (!value.is_number_integer()) return false;
  if (value.is_number_unsigned()) {
    *size = value.get<uint64_t>();
    return true;
  }
  const int64_t signed_value = value.get<int64_t>();
  if (signed_value < 0) return false;
  *size = static_cast<uint64_t>(signed_value);
  return true;
}

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data, [begin, end)
  uint64_t end = 0;
};

// One tensor's entry of the header, checked against itself (its offsets span exactly its
// shape's bytes); InvalidArgument "tensor '<name>': <why>" when it is refused.
absl::StatusOr<SafetensorsEntry> ReadSafetensorsEntry(const std::string& name,
                                                      const nlohmann::json& entry) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", why));
  };
  if (!entry.is_object()) return bad("its entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) return bad(absl::StrCat("no ", key));
  }
  SafetensorsEntry read;
  read.name = name;
  if (!entry["dtype"].is_string()) return bad("dtype is not a string");
  absl::StatusOr<at::ScalarType> dtype = SafetensorsDtype(entry["dtype"].get<std::string>());
  if (!dtype.ok()) return bad(dtype.status().message());
  read.dtype = *dtype;
  const nlohmann::json& shape = entry["shape"];
  if (!shape.is_array()) return bad("shape is not a list");
  uint64_t numel = 1;
  for (const nlohmann::json& dim : shape) {
    uint64_t size = 0;
    if (!AsSize(dim, &size) || size > static_cast<uint64_t>(INT64_MAX))
      return bad(absl::StrCat("shape ", shape.dump(), " is not a list of sizes >= 0"));
    if (__builtin_mul_overflow(numel, size, &numel))
      return bad(absl::StrCat("shape ", shape.dump(), " has more elements than 2^64"));
    read.shape.push_back(static_cast<int64_t>(size));
  }
  const nlohmann::json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !AsSize(offsets[0], &read.begin) ||
      !AsSize(offsets[1], &read.end) || read.begin > read.end) {
    return bad(
        absl::StrCat("data_offsets ", offsets.dump(), " are not [begin, end] with begin <= end"));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(c10::elementSize(read.dtype)), &bytes) ||
      bytes != read.end - read.begin) {
    return bad(absl::StrCat("data_offsets ", offsets.dump(), " span ", read.end - read.begin,
                            " bytes, its shape ", shape.dump(), " of ",
                            entry["dtype"].get<std::string>(), " needs ", numel, " elements"));
  }
  return read;
}

// The safetensors layout: an 8-byte little-endian header length, the JSON header
// {name: {dtype, shape, data_offsets}} (and an optional "__metadata__" of strings), then
// the data the offsets point into, which the tensors cover exactly, without overlap or gap
// (as the safetensors reference reader checks).
absl::StatusOr<std::map<std::string, at::Tensor>> ParseSafetensors(const std::string& path,
                                                                   const std::string& bytes) {
  auto bad = [&](absl::string_view why) {
    return RefuseModelFile(kFlag, path, absl::StrCat("safetensors file: ", why));
  };
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return bad(absl::StrCat("the header claims ", header_size, " bytes, over the limit of ",
                            kMaxSafetensorsHeaderBytes));
  }
  if (header_size > bytes.size() - 8)
    return bad("the header runs past the end of the file (truncated?)");
  DuplicateKeys keys;
  const nlohmann::json header =
      nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_size, keys.Callback(),
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("the header is not a JSON object");
  if (!keys.duplicate().empty())
    return bad(absl::StrCat("the header names '", keys.duplicate(), "' twice"));
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad("__metadata__ is not an object");
      continue;
    }
    absl::StatusOr<SafetensorsEntry> read = ReadSafetensorsEntry(name, entry);
    if (!read.ok()) return bad(read.status().message());
    entries.push_back(*std::move(read));
  }
  const uint64_t data_size = bytes.size() - 8 - header_size;
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
              return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
            });
  uint64_t covered = 0;  // the data's bytes the tensors so far cover, from its start
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin != covered) {
      return bad(absl::StrCat(
          "tensor '", e->name, "': its data starts at byte ", e->begin,
          e->begin < covered ? ", inside another tensor's" : ", after a gap in the data",
          " (expected ", covered, ")"));
    }
    covered = e->end;
  }
  if (covered != data_size) {
    return bad(absl::StrCat("the tensors cover ", covered, " bytes of data, the file holds ",
                            data_size, " (truncated, or trailing bytes)"));
  }
  const char* data = bytes.data() + 8 + header_size;
  std::map<std::string, at::Tensor> state;
  for (const SafetensorsEntry& e : entries) {
    // libtorch refuses what it cannot shape (an empty tensor whose other sizes overflow).
    absl::StatusOr<at::Tensor> tensor = TorchCall(absl::StrCat("tensor '", e.name, "'"), [&] {
      return at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    });
    if (!tensor.ok()) return bad(tensor.status().message());
    if (e.end > e.begin) std::memcpy(tensor->data_ptr(), data + e.begin, e.end - e.begin);
    state[e.name] = *std::move(tensor);
  }
  return state;
}

// torch.save's zip format, read by libtorch's unpickler: Note [Pickled state dicts].
absl::StatusOr<std::map<std::string, at::Tensor>> ParseTorchSave(const std::string& path,
                                                                 const std::string& bytes) {
  absl::StatusOr<c10::IValue> loaded = TorchCall("reading torch.save's format", [&] {
    return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  });
  if (!loaded.ok()) {
    return RefuseModelFile(kFlag, path, loaded.status().message());
  }
  if (!loaded->isGenericDict()) {
    return RefuseModelFile(kFlag, path,
                           absl::StrCat("holds a ", loaded->tagKind(), ", not a state dict"));
  }
  std::map<std::string, at::Tensor> state;
  for (const auto& item : loaded->toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      return RefuseModelFile(kFlag, path, "not a state dict (an entry is not name -> tensor)");
    }
    if (!state.emplace(item.key().toStringRef(), item.value().toTensor()).second)
      return RefuseModelFile(kFlag, path,
                             absl::StrCat("names '", item.key().toStringRef(), "' twice"));
  }
  return state;
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> ParseStateDictFile(
    const std::string& path, const std::string& bytes, const StateDictFileOptions& options) {
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), "PK\x03\x04", 4) == 0) {
    if (!options.allow_pickle) {
      return RefuseModelFile(
          kFlag, path,
          "torch.save's format is a Python pickle, which Stoker reads only when the run trusts "
          "the file (--allow_pickle); convert it to safetensors instead: python -c \"import torch, "
          "safetensors.torch as s; s.save_file({k: v.contiguous() for k, v in torch.load('IN', "
          "weights_only=True).items()}, 'OUT.safetensors')\"");
    }
    return ParseTorchSave(path, bytes);
  }
  if (bytes.size() >= 10 && bytes[8] == '{') {
    try {
      return ParseSafetensors(path, bytes);
    } catch (const std::exception& e) {  // a JSON access the checks above missed
      return RefuseModelFile(kFlag, path, absl::StrCat("malformed safetensors header: ", e.what()));
    }
  }
  return RefuseModelFile(kFlag, path, "neither torch.save's zip format nor a safetensors file");
}

absl::StatusOr<std::map<std::string, at::Tensor>> ReadStateDictFile(
    const std::string& path, const StateDictFileOptions& options) {
  ASSIGN_OR_RETURN(std::string bytes, ReadModelFile(kFlag, path));
  return ParseStateDictFile(path, bytes, options);
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
    return WithExitCode(absl::InvalidArgumentError(message), kExitUsage);
  }
  return TorchCall(absl::StrCat(source, ": copying the weights"), [&] {
    c10::NoGradGuard no_grad;
    for (auto& [name, tensor] : items) tensor.copy_(state.at(name));
  });
}

}  // namespace stoker::trainer
