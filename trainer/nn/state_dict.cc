// Python-ordered state dicts and their pickle (see state_dict.h).
#include "trainer/nn/state_dict.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/torch_status.h"

namespace stoker::trainer {
namespace {

void AppendStateDict(const torch::nn::Module& module, const std::string& prefix,
                     std::vector<std::pair<std::string, torch::Tensor>>& items) {
  for (const auto& parameter : module.named_parameters(/*recurse=*/false)) {
    if (parameter.value().defined())
      items.emplace_back(prefix + parameter.key(), parameter.value());
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

// Note [Untagged pickle]: torch::pickle_save writes the same zip container, but its Pickler
// tags every dict with its static type through torch.jit._pickle.restore_type_tag, a global
// that torch.load(weights_only=True) (the default since PyTorch 2.6) refuses. This Pickler
// writes plain dicts; tensors go in as torch.save writes them (_rebuild_tensor_v2 over
// storages "data/<key>"), which the weights-only unpickler accepts.
absl::StatusOr<std::string> PickleStateDict(const torch::nn::Module& module) {
  return TorchCall("PickleStateDict", [&]() -> absl::StatusOr<std::string> {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
    for (const auto& [name, tensor] : StateDictItems(module)) {
      dict.insert(name, tensor.detach().to(at::kCPU));
    }
    std::string pickle;
    torch::jit::Pickler pickler(
        [&pickle](const char* data, size_t size) { pickle.append(data, size); },
        /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
        /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
    pickler.protocol();
    pickler.pushIValue(c10::IValue(dict));
    pickler.stop();

    std::string container;
    caffe2::serialize::PyTorchStreamWriter writer([&container](const void* data, size_t size) {
      container.append(static_cast<const char*>(data), size);
      return size;
    });
    const std::vector<at::Tensor>& storages = pickler.tensorData();
    for (size_t i = 0; i < storages.size(); ++i) {
      const torch::jit::WriteableTensorData data = torch::jit::getWriteableTensorData(storages[i]);
      writer.writeRecord(absl::StrCat("data/", i), data.data(), data.sizeInBytes());
    }
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    constexpr char kByteOrder[] = "little";
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "byteorder record says little");
    writer.writeRecord("byteorder", kByteOrder, sizeof(kByteOrder) - 1);
    writer.writeEndOfFile();
    return container;
  });
}

}  // namespace stoker::trainer
