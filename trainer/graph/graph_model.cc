#include "trainer/graph/graph_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/exit_codes.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/graph/export_archive.h"
#include "trainer/graph/graph_node.h"
#include "trainer/nn/model_file.h"

namespace stoker::trainer {
namespace {

// The submodule of `root` that owns the tensor named `name` ("layer1.0.bn1.weight" ->
// layer1/0/bn1), made empty where missing, and the tensor's own name ("weight").
std::pair<torch::nn::Module*, std::string> Owner(
    torch::nn::Module& root, const std::string& name,
    std::map<std::string, std::shared_ptr<torch::nn::Module>>& made) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  torch::nn::Module* owner = &root;
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix = prefix.empty() ? parts[i] : absl::StrCat(prefix, ".", parts[i]);
    auto it = made.find(prefix);
    if (it == made.end()) {
      auto child = std::make_shared<torch::nn::Module>();
      owner->register_module(parts[i], child);
      it = made.emplace(prefix, std::move(child)).first;
    }
    owner = it->second.get();
  }
  return {owner, parts.back()};
}

}  // namespace

absl::StatusOr<std::shared_ptr<GraphModel>> GraphModel::Load(const std::string& path,
                                                             const GraphModelOptions& options) {
  ASSIGN_OR_RETURN(ExportArchive archive, ReadExportArchive(path));
  return FromArchive(archive, options);
}

absl::StatusOr<std::shared_ptr<GraphModel>> GraphModel::FromArchive(
    const ExportArchive& archive, const GraphModelOptions& options) {
  absl::StatusOr<std::shared_ptr<GraphModel>> model;
  try {
    model = Build(archive, options);
  } catch (const std::exception& e) {  // a field of the wrong JSON type, or missing
    return RefuseModelFile("--model", archive.path, absl::StrCat("malformed program: ", e.what()));
  }
  if (!model.ok()) return WithExitCode(model.status(), kExitUsage);
  return model;
}

absl::StatusOr<std::shared_ptr<GraphModel>> GraphModel::Build(const ExportArchive& archive,
                                                              const GraphModelOptions& options) {
  const std::string& path = archive.path;
  std::set<std::string> non_persistent;
  const nlohmann::json& input_specs = Field(Field(archive.train, "signature"), "input_specs");
  for (const nlohmann::json& spec :
       input_specs.is_array() ? input_specs : nlohmann::json::array()) {
    if (spec.contains("buffer") && !Field(spec, "buffer").value("persistent", true)) {
      non_persistent.insert(Field(spec, "buffer").value("buffer_name", ""));
    }
  }
  std::shared_ptr<GraphModel> model(new GraphModel());
  GraphState state;
  absl::Status registered =
      TorchCall(absl::StrCat("--model=", path, ": registering the weights"), [&]() -> absl::Status {
        std::map<std::string, std::shared_ptr<torch::nn::Module>> made;
        for (const ArchiveWeight& w : archive.weights) {
          if (non_persistent.count(w.name) > 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("--model=", path, ": buffer ", w.name,
                             " is not persistent (not in the state dict); Stoker keeps a model's "
                             "state in its state dict: register it "
                             "with persistent=True"));
          }
          auto [owner, leaf] = Owner(*model, w.name, made);
          if (w.is_parameter) {
            state.parameters[w.name] = owner->register_parameter(leaf, w.value, w.requires_grad);
          } else {
            state.buffers[w.name] = owner->register_buffer(leaf, w.value);
          }
        }
        return absl::OkStatus();
      });
  RETURN_IF_ERROR(registered);

  GraphState eval_state = state;
  eval_state.constants.clear();
  for (const ArchiveWeight& c : archive.train_constants) {
    state.constants[c.name] = c.value;
    model->constants_.push_back(c.value);
  }
  for (const ArchiveWeight& c : archive.eval_constants) {
    eval_state.constants[c.name] = c.value;
    model->constants_.push_back(c.value);
  }

  GraphProgramOptions train_options;
  train_options.where = absl::StrCat("--model=", path, " (training program)");
  train_options.num_classes = options.num_classes;
  train_options.image_size = options.image_size;
  train_options.fused_blocks = options.fused_blocks;
  train_options.pointwise_fusion = options.pointwise_fusion;
  train_options.fp8 = options.fp8;
  train_options.fp8_recipe = options.fp8_recipe;
  ASSIGN_OR_RETURN(model->train_, GraphProgram::Build(archive.train, state, train_options));
  GraphProgramOptions eval_options = train_options;
  eval_options.fp8 = false;  // Note [FP8 linear layers in a program]
  model->has_eval_program_ = archive.eval.has_value();
  if (archive.eval.has_value()) {
    eval_options.where = absl::StrCat("--model=", path, " (evaluation program)");
    ASSIGN_OR_RETURN(model->eval_, GraphProgram::Build(*archive.eval, eval_state, eval_options));
  } else {
    eval_options.eval_from_training = true;
    ASSIGN_OR_RETURN(model->eval_, GraphProgram::Build(archive.train, state, eval_options));
  }
  return model;
}

void GraphModel::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(device, dtype, non_blocking);
  MoveConstants(device, non_blocking);
  PlaceFp8States(device);
}

void GraphModel::to(torch::Device device, bool non_blocking) {
  torch::nn::Module::to(device, non_blocking);
  MoveConstants(device, non_blocking);
  PlaceFp8States(device);
}

void GraphModel::PlaceFp8States(torch::Device device) {
  torch::NoGradGuard no_grad;
  for (const auto& state : train_->fp8_states()) state->PlaceOn(device);
}

std::vector<c10::intrusive_ptr<Fp8LinearState>> GraphModel::Fp8States() {
  return train_->fp8_states();
}

void GraphModel::MoveConstants(torch::Device device, bool non_blocking) {
  torch::NoGradGuard no_grad;
  for (at::Tensor& constant : constants_) {
    constant.set_data(constant.to(device, /*non_blocking=*/non_blocking));
  }
}

torch::Tensor GraphModel::forward(torch::Tensor images) {
  GraphProgram& program = is_training() ? *train_ : *eval_;
  return program.Run(images, &GeneratorFor(images.device()));
}

void GraphModel::SetRandomSeed(uint64_t seed) {
  seed_ = seed;
  for (auto& [device, generator] : generators_) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  }
}

std::vector<at::Generator> GraphModel::DeviceGenerators() {
  std::vector<at::Generator> cuda;
  for (auto& [device, generator] : generators_) {
    if (generator.device().is_cuda()) cuda.push_back(generator);
  }
  return cuda;
}

at::Generator& GraphModel::GeneratorFor(const c10::Device& device) {
  const std::string key = device.str();
  auto it = generators_.find(key);
  if (it == generators_.end()) {
    at::Generator generator = device.is_cuda()
                                  ? at::detail::getCUDAHooks().getNewGenerator(device.index())
                                  : at::make_generator<at::CPUGeneratorImpl>(seed_);
    generator.set_current_seed(seed_);
    it = generators_.emplace(key, std::move(generator)).first;
  }
  return it->second;
}

}  // namespace stoker::trainer
