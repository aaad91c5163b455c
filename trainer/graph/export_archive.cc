#include "trainer/graph/export_archive.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/torch_status.h"
#include "trainer/graph/export_schema.h"
#include "trainer/graph/graph_node.h"
#include "trainer/nn/model_file.h"

namespace stoker::trainer {
namespace {

using nlohmann::json;
using Reader = caffe2::serialize::PyTorchStreamReader;

// The serialiser's schema major version Stoker reads (torch/_export/serde/schema.py).
constexpr int kSchemaMajor = 8;

absl::Status Refuse(const std::string& path, absl::string_view why) {
  return RefuseModelFile("--model", path, why);
}

// The archive's bytes, as libtorch's zip reader reads them.
class BytesReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReadAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// An archive being read: its file's name (for errors), its size and its zip reader.
struct OpenArchive {
  const std::string& path;
  size_t size;
  Reader& reader;
};

absl::StatusOr<std::string> ReadRecord(const OpenArchive& archive, const std::string& name) {
  if (!archive.reader.hasRecord(name))
    return Refuse(archive.path, absl::StrCat("the archive has no ", name));
  absl::StatusOr<std::string> record =
      TorchCall(absl::StrCat("reading ", name), [&]() -> absl::StatusOr<std::string> {
        // torch.export.save stores records uncompressed: one that claims more bytes than the
        // whole archive is a compressed bomb or a lie, refused before anything is allocated.
        const size_t size = archive.reader.getRecordSize(name);
        if (size > archive.size) {
          return Refuse(archive.path,
                        absl::StrCat(name, " claims ", size, " bytes, more than the archive's ",
                                     archive.size));
        }
        auto [data, read] = archive.reader.getRecord(name);
        return std::string(static_cast<const char*>(data.get()), read);
      });
  if (!record.ok() && record.status().code() == absl::StatusCode::kInternal) {
    return Refuse(archive.path, record.status().message());  // a zip fault libtorch found
  }
  return record;
}

absl::StatusOr<json> ReadJson(const OpenArchive& archive, const std::string& name) {
  ASSIGN_OR_RETURN(std::string text, ReadRecord(archive, name));
  json parsed = json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return Refuse(archive.path, absl::StrCat(name, " is not a JSON object"));
  }
  return parsed;
}

// The elements a view of `sizes`, `strides` and `offset` reaches, one past its last (0 for
// an empty view); false when a size, stride or the offset is negative or the count
// overflows.
bool ElementsReached(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                     int64_t offset, int64_t* reached) {
  if (offset < 0) return false;
  int64_t last = offset;  // the last element's index
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) return false;
    if (sizes[d] == 0) {
      *reached = 0;
      return true;
    }
    int64_t span = 0;
    if (__builtin_mul_overflow(sizes[d] - 1, strides[d], &span) ||
        __builtin_add_overflow(last, span, &last)) {
      return false;
    }
  }
  return !__builtin_add_overflow(last, 1, reached);
}

// The tensor stored in the record `record`, viewed as `sizes`, `strides` and `offset` of
// `dtype`; refusals start with `where`.
absl::StatusOr<at::Tensor> ReadView(const OpenArchive& archive, const std::string& record,
                                    const std::string& where, at::ScalarType dtype,
                                    const std::vector<int64_t>& sizes,
                                    const std::vector<int64_t>& strides, int64_t offset) {
  auto bad = [&](absl::string_view why) {
    return Refuse(archive.path, absl::StrCat(where, ": ", why));
  };
  if (strides.size() != sizes.size()) {
    return bad(absl::StrCat("it has ", sizes.size(), " sizes and ", strides.size(), " strides"));
  }
  int64_t reached = 0;
  if (!ElementsReached(sizes, strides, offset, &reached)) {
    return bad(absl::StrCat("sizes [", absl::StrJoin(sizes, ","), "], strides [",
                            absl::StrJoin(strides, ","), "] and storage offset ", offset,
                            " are not a view of a storage (negative, or past 2^63)"));
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadRecord(archive, record));
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t needed = 0;
  if (reached > 0 && (__builtin_mul_overflow(reached, item, &needed) ||
                      static_cast<int64_t>(bytes.size()) < needed || bytes.size() % item != 0)) {
    return bad(absl::StrCat(bytes.size(), " bytes stored, the tensor needs ", reached, " of ", item,
                            " bytes"));
  }
  // A view larger than the archive (a broadcast: strides of 0) would be materialised from a
  // few stored bytes into any amount of memory; no exported weight is one.
  int64_t tensor_bytes = item;
  for (int64_t size : sizes) {
    if (__builtin_mul_overflow(tensor_bytes, size, &tensor_bytes)) tensor_bytes = INT64_MAX;
  }
  if (reached > 0 && tensor_bytes > static_cast<int64_t>(archive.size)) {
    return bad(absl::StrCat("its view of ", bytes.size(), " stored bytes spans ", tensor_bytes,
                            ", more than the archive's ", archive.size));
  }
  // libtorch refuses what it cannot shape (an empty tensor whose other sizes overflow).
  absl::StatusOr<at::Tensor> tensor = TorchCall("making the tensor", [&] {
    if (reached == 0) return at::empty(sizes, at::TensorOptions().dtype(dtype));
    const at::Tensor flat = at::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size()) / item},
                                          at::TensorOptions().dtype(dtype));
    return flat.as_strided(sizes, strides, offset).contiguous().clone();
  });
  if (!tensor.ok()) return bad(tensor.status().message());
  return tensor;
}

// A weight or constant of the program `model`, stored raw as its whole storage's bytes,
// restrided by its tensor_meta.
absl::StatusOr<at::Tensor> ReadTensor(const OpenArchive& archive, const std::string& folder,
                                      const std::string& name, const json& entry) {
  const std::string where = absl::StrCat("weight ", name);
  auto bad = [&](absl::string_view why) {
    return Refuse(archive.path, absl::StrCat(where, ": ", why));
  };
  if (!entry.is_object() || !Field(entry, "path_name").is_string() ||
      !Field(entry, "tensor_meta").is_object()) {
    return bad("malformed entry in the weights config (no path_name or tensor_meta)");
  }
  if (Field(entry, "use_pickle").is_boolean() && entry["use_pickle"].get<bool>()) {
    return bad("a pickled tensor subclass; only plain tensors load");
  }
  const json& meta = entry["tensor_meta"];
  if (!Field(meta, "dtype").is_number_integer()) return bad("its dtype is not a dtype code");
  // The schema's readers word their refusals "<where>: ...".
  auto refused = [&](const absl::Status& status) { return Refuse(archive.path, status.message()); };
  const absl::StatusOr<at::ScalarType> dtype = ScalarTypeOf(meta["dtype"].get<int>(), where);
  if (!dtype.ok()) return refused(dtype.status());
  absl::StatusOr<std::vector<int64_t>> sizes = StaticInts(Field(meta, "sizes"), where);
  if (!sizes.ok()) return refused(sizes.status());
  absl::StatusOr<std::vector<int64_t>> strides = StaticInts(Field(meta, "strides"), where);
  if (!strides.ok()) return refused(strides.status());
  absl::StatusOr<std::vector<int64_t>> offset =
      StaticInts(json::array({Field(meta, "storage_offset")}), where);
  if (!offset.ok()) return refused(offset.status());
  return ReadView(archive, absl::StrCat(folder, entry["path_name"].get<std::string>()), where,
                  *dtype, *sizes, *strides, (*offset)[0]);
}

// The boolean field `key` of `object`, `otherwise` when it has none.
bool BoolField(const json& object, const char* key, bool otherwise) {
  const json& field = Field(object, key);
  return field.is_boolean() ? field.get<bool>() : otherwise;
}

absl::StatusOr<std::vector<ArchiveWeight>> ReadWeights(const OpenArchive& archive,
                                                       const std::string& model) {
  const std::string name = absl::StrCat("data/weights/", model, "_weights_config.json");
  ASSIGN_OR_RETURN(json config, ReadJson(archive, name));
  if (!Field(config, "config").is_object()) {
    return Refuse(archive.path, absl::StrCat(name, " has no config"));
  }
  std::vector<ArchiveWeight> parameters, buffers;
  for (const auto& [weight_name, entry] : config["config"].items()) {
    ASSIGN_OR_RETURN(at::Tensor value, ReadTensor(archive, "data/weights/", weight_name, entry));
    ArchiveWeight weight{weight_name, std::move(value), BoolField(entry, "is_param", false),
                         BoolField(entry["tensor_meta"], "requires_grad", false)};
    (weight.is_parameter ? parameters : buffers).push_back(std::move(weight));
  }
  for (ArchiveWeight& b : buffers) parameters.push_back(std::move(b));
  return parameters;
}

absl::StatusOr<std::vector<ArchiveWeight>> ReadConstants(const OpenArchive& archive,
                                                         const std::string& model) {
  const std::string name = absl::StrCat("data/constants/", model, "_constants_config.json");
  std::vector<ArchiveWeight> constants;
  if (!archive.reader.hasRecord(name)) return constants;
  ASSIGN_OR_RETURN(json config, ReadJson(archive, name));
  if (!Field(config, "config").is_object()) return constants;
  for (const auto& [constant, entry] : config["config"].items()) {
    ASSIGN_OR_RETURN(at::Tensor value, ReadTensor(archive, "data/constants/", constant, entry));
    constants.push_back(ArchiveWeight{constant, std::move(value), false, false});
  }
  return constants;
}

// The program `model`'s graph_module, after checking its schema and torch versions.
absl::StatusOr<json> ReadProgram(const OpenArchive& archive, const std::string& model,
                                 std::string* torch_version) {
  const std::string name = absl::StrCat("models/", model, ".json");
  ASSIGN_OR_RETURN(json program, ReadJson(archive, name));
  const json& version_field = Field(program, "torch_version");
  const std::string version = version_field.is_string() ? version_field.get<std::string>() : "";
  if (!absl::StartsWith(version, absl::StrCat(kExportTorchRelease, "."))) {
    return Refuse(archive.path,
                  absl::StrCat("exported by torch ", version.empty() ? "(unknown)" : version,
                               "; Stoker runs graphs of torch ", kExportTorchRelease,
                               ": export the model again with torch ", kExportTorchRelease));
  }
  *torch_version = version;
  const json& major_field = Field(Field(program, "schema_version"), "major");
  const int64_t major = major_field.is_number_integer() ? major_field.get<int64_t>() : -1;
  if (major != kSchemaMajor) {
    return Refuse(archive.path, absl::StrCat(name, ": export schema version ", major,
                                             ", Stoker reads ", kSchemaMajor));
  }
  if (!Field(program, "graph_module").is_object()) {
    return Refuse(archive.path, absl::StrCat(name, " has no graph_module"));
  }
  json graph_module = program["graph_module"];
  const json& range_constraints = Field(program, "range_constraints");
  graph_module["range_constraints"] =
      range_constraints.is_object() ? range_constraints : json::object();
  return graph_module;
}

absl::StatusOr<ExportArchive> ParseOpenArchive(const OpenArchive& open) {
  const std::string& path = open.path;
  ExportArchive archive;
  archive.path = path;
  if (!open.reader.hasRecord("archive_format")) {
    return Refuse(path,
                  "a zip file but not a torch.export archive (no archive_format record; a "
                  "torch.save checkpoint or TorchScript file?)");
  }
  ASSIGN_OR_RETURN(std::string format, ReadRecord(open, "archive_format"));
  if (format != "pt2") {
    return Refuse(
        path, absl::StrCat("archive_format is '", format, "', not a torch.export archive ('pt2')"));
  }
  if (open.reader.hasRecord("archive_version")) {
    ASSIGN_OR_RETURN(std::string version, ReadRecord(open, "archive_version"));
    if (version != "0") {
      return Refuse(path,
                    absl::StrCat("archive_version ", version, "; Stoker reads version 0 (torch ",
                                 kExportTorchRelease, ")"));
    }
  }
  std::string train_model;
  if (open.reader.hasRecord("models/train.json")) {
    train_model = "train";
  } else if (open.reader.hasRecord("models/model.json")) {
    train_model = "model";
  } else {
    return Refuse(path, "the archive holds no program (models/train.json or models/model.json)");
  }
  ASSIGN_OR_RETURN(archive.train, ReadProgram(open, train_model, &archive.torch_version));
  ASSIGN_OR_RETURN(archive.weights, ReadWeights(open, train_model));
  ASSIGN_OR_RETURN(archive.train_constants, ReadConstants(open, train_model));
  if (train_model == "train" && open.reader.hasRecord("models/eval.json")) {
    std::string eval_version;
    ASSIGN_OR_RETURN(archive.eval, ReadProgram(open, "eval", &eval_version));
    ASSIGN_OR_RETURN(archive.eval_constants, ReadConstants(open, "eval"));
  }
  return archive;
}

}  // namespace

absl::StatusOr<ExportArchive> ParseExportArchive(const std::string& path,
                                                 const std::string& bytes) {
  std::unique_ptr<Reader> reader;
  absl::Status opened = TorchCall("opening", [&] {
    reader = std::make_unique<Reader>(std::make_shared<BytesReadAdapter>(bytes));
  });
  if (!opened.ok()) {
    return Refuse(path,
                  absl::StrCat("not a readable torch.export archive (truncated, or not a zip file "
                               "that torch.export.save wrote): ",
                               opened.message()));
  }
  try {
    return ParseOpenArchive(OpenArchive{path, bytes.size(), *reader});
  } catch (const std::exception& e) {  // a JSON field of the wrong type the checks missed
    return Refuse(path, absl::StrCat("malformed archive: ", e.what()));
  }
}

absl::StatusOr<ExportArchive> ReadExportArchive(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadModelFile("--model", path));
  return ParseExportArchive(path, bytes);
}

}  // namespace stoker::trainer
