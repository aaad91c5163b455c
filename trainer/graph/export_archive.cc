#include "trainer/graph/export_archive.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <fstream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/graph/export_schema.h"

namespace stoker::trainer {
namespace {

using nlohmann::json;
using Reader = caffe2::serialize::PyTorchStreamReader;

// The serialiser's schema major version Stoker reads (torch/_export/serde/schema.py).
constexpr int kSchemaMajor = 8;

absl::Status Refuse(const std::string& path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--model=", path, ": ", why));
}

absl::StatusOr<std::string> ReadRecord(Reader& reader, const std::string& path,
                                       const std::string& name) {
  if (!reader.hasRecord(name)) return Refuse(path, absl::StrCat("the archive has no ", name));
  return TorchCall(absl::StrCat("--model=", path, ": reading ", name), [&] {
    auto [data, size] = reader.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
  });
}

absl::StatusOr<json> ReadJson(Reader& reader, const std::string& path, const std::string& name) {
  ASSIGN_OR_RETURN(std::string text, ReadRecord(reader, path, name));
  json parsed = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Refuse(path, absl::StrCat(name, " is not a JSON object"));
  }
  return parsed;
}

// A weight or constant of the program `model`, stored raw as its whole storage's bytes,
// restrided by its tensor_meta.
absl::StatusOr<at::Tensor> ReadTensor(Reader& reader, const std::string& path,
                                      const std::string& folder, const std::string& name,
                                      const json& entry) {
  const std::string where = absl::StrCat("weight ", name);
  if (!entry.is_object() || !entry.contains("path_name") || !entry.contains("tensor_meta")) {
    return Refuse(path, absl::StrCat(where, ": malformed entry in the weights config"));
  }
  if (entry.value("use_pickle", false)) {
    return Refuse(path,
                  absl::StrCat(where, " is a pickled tensor subclass; only plain tensors load"));
  }
  const json& meta = entry["tensor_meta"];
  ASSIGN_OR_RETURN(at::ScalarType dtype, ScalarTypeOf(meta.value("dtype", 0), where));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, StaticInts(meta["sizes"], where));
  ASSIGN_OR_RETURN(std::vector<int64_t> strides, StaticInts(meta["strides"], where));
  ASSIGN_OR_RETURN(std::vector<int64_t> offset,
                   StaticInts(json::array({meta["storage_offset"]}), where));
  ASSIGN_OR_RETURN(
      std::string bytes,
      ReadRecord(reader, path, absl::StrCat(folder, entry["path_name"].get<std::string>())));
  return TorchCall(
      absl::StrCat("--model=", path, ": ", where), [&]() -> absl::StatusOr<at::Tensor> {
        const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
        int64_t needed = sizes.empty() ? 1 : 0;  // elements the view reaches, +1
        bool empty = false;
        for (size_t d = 0; d < sizes.size(); ++d) {
          if (sizes[d] == 0) empty = true;
          needed += (sizes[d] - 1) * strides[d];
        }
        if (!sizes.empty()) needed += 1;
        needed += offset[0];
        if (empty) return at::empty(sizes, at::TensorOptions().dtype(dtype));
        if (static_cast<int64_t>(bytes.size()) < needed * item || bytes.size() % item != 0) {
          return Refuse(path, absl::StrCat(where, ": ", bytes.size(),
                                           " bytes stored, the tensor needs ", needed * item));
        }
        const at::Tensor flat =
            at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size()) / item},
                          at::TensorOptions().dtype(dtype));
        return flat.as_strided(sizes, strides, offset[0]).contiguous().clone();
      });
}

absl::StatusOr<std::vector<ArchiveWeight>> ReadWeights(Reader& reader, const std::string& path,
                                                       const std::string& model) {
  ASSIGN_OR_RETURN(
      json config,
      ReadJson(reader, path, absl::StrCat("data/weights/", model, "_weights_config.json")));
  if (!config.contains("config") || !config["config"].is_object()) {
    return Refuse(path, absl::StrCat("data/weights/", model, "_weights_config.json has no config"));
  }
  std::vector<ArchiveWeight> parameters, buffers;
  for (const auto& [name, entry] : config["config"].items()) {
    ASSIGN_OR_RETURN(at::Tensor value, ReadTensor(reader, path, "data/weights/", name, entry));
    ArchiveWeight weight{name, std::move(value), entry.value("is_param", false),
                         entry["tensor_meta"].value("requires_grad", false)};
    (weight.is_parameter ? parameters : buffers).push_back(std::move(weight));
  }
  for (ArchiveWeight& b : buffers) parameters.push_back(std::move(b));
  return parameters;
}

absl::StatusOr<std::vector<ArchiveWeight>> ReadConstants(Reader& reader, const std::string& path,
                                                         const std::string& model) {
  const std::string name = absl::StrCat("data/constants/", model, "_constants_config.json");
  std::vector<ArchiveWeight> constants;
  if (!reader.hasRecord(name)) return constants;
  ASSIGN_OR_RETURN(json config, ReadJson(reader, path, name));
  if (!config.contains("config") || !config["config"].is_object()) return constants;
  for (const auto& [constant, entry] : config["config"].items()) {
    ASSIGN_OR_RETURN(at::Tensor value,
                     ReadTensor(reader, path, "data/constants/", constant, entry));
    constants.push_back(ArchiveWeight{constant, std::move(value), false, false});
  }
  return constants;
}

// The program `model`'s graph_module, after checking its schema and torch versions.
absl::StatusOr<json> ReadProgram(Reader& reader, const std::string& path, const std::string& model,
                                 std::string* torch_version) {
  const std::string name = absl::StrCat("models/", model, ".json");
  ASSIGN_OR_RETURN(json program, ReadJson(reader, path, name));
  const std::string version = program.value("torch_version", "");
  if (!absl::StartsWith(version, absl::StrCat(kExportTorchRelease, "."))) {
    return Refuse(path, absl::StrCat("exported by torch ", version.empty() ? "(unknown)" : version,
                                     "; Stoker runs graphs of torch ", kExportTorchRelease,
                                     ": export the model again with torch ", kExportTorchRelease));
  }
  *torch_version = version;
  const int major =
      program.contains("schema_version") ? program["schema_version"].value("major", -1) : -1;
  if (major != kSchemaMajor) {
    return Refuse(path, absl::StrCat(name, ": export schema version ", major, ", Stoker reads ",
                                     kSchemaMajor));
  }
  if (!program.contains("graph_module") || !program["graph_module"].is_object()) {
    return Refuse(path, absl::StrCat(name, " has no graph_module"));
  }
  json graph_module = program["graph_module"];
  graph_module["range_constraints"] = program.value("range_constraints", json::object());
  return graph_module;
}

}  // namespace

absl::StatusOr<ExportArchive> ReadExportArchive(const std::string& path) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) return Refuse(path, "cannot open the file");
  }
  std::unique_ptr<Reader> reader;
  absl::Status opened = TorchCall("opening", [&] { reader = std::make_unique<Reader>(path); });
  if (!opened.ok()) {
    return Refuse(path,
                  absl::StrCat("not a readable torch.export archive (truncated, or not a zip file "
                               "that torch.export.save wrote): ",
                               opened.message()));
  }
  ExportArchive archive;
  archive.path = path;
  if (!reader->hasRecord("archive_format")) {
    return Refuse(path,
                  "a zip file but not a torch.export archive (no archive_format record; a "
                  "torch.save checkpoint or TorchScript file?)");
  }
  ASSIGN_OR_RETURN(std::string format, ReadRecord(*reader, path, "archive_format"));
  if (format != "pt2") {
    return Refuse(
        path, absl::StrCat("archive_format is '", format, "', not a torch.export archive ('pt2')"));
  }
  if (reader->hasRecord("archive_version")) {
    ASSIGN_OR_RETURN(std::string version, ReadRecord(*reader, path, "archive_version"));
    if (version != "0") {
      return Refuse(path,
                    absl::StrCat("archive_version ", version, "; Stoker reads version 0 (torch ",
                                 kExportTorchRelease, ")"));
    }
  }
  std::string train_model;
  if (reader->hasRecord("models/train.json")) {
    train_model = "train";
  } else if (reader->hasRecord("models/model.json")) {
    train_model = "model";
  } else {
    return Refuse(path, "the archive holds no program (models/train.json or models/model.json)");
  }
  ASSIGN_OR_RETURN(archive.train, ReadProgram(*reader, path, train_model, &archive.torch_version));
  ASSIGN_OR_RETURN(archive.weights, ReadWeights(*reader, path, train_model));
  ASSIGN_OR_RETURN(archive.train_constants, ReadConstants(*reader, path, train_model));
  if (train_model == "train" && reader->hasRecord("models/eval.json")) {
    std::string eval_version;
    ASSIGN_OR_RETURN(archive.eval, ReadProgram(*reader, path, "eval", &eval_version));
    ASSIGN_OR_RETURN(archive.eval_constants, ReadConstants(*reader, path, "eval"));
  }
  return archive;
}

}  // namespace stoker::trainer
