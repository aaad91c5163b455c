// ExportArchive: what a torch.export archive (`.pt2`, the zip `torch.export.save` and
// `package_pt2` write) holds for Stoker: the serialised programs and the weights, read
// with libtorch's zip reader and nlohmann-json. Two layouts load:
// - a plain `torch.export.save` archive: one program, `models/model.json`, taken as the
//   training program;
// - Stoker's (tools/export_model.py): `models/train.json` and `models/eval.json`.
// The archive's format and version, the serialiser's schema version and the torch version
// that wrote it are checked; weights are materialised on the CPU under their state-dict
// names.
#ifndef STOKER_TRAINER_GRAPH_EXPORT_ARCHIVE_H_
#define STOKER_TRAINER_GRAPH_EXPORT_ARCHIVE_H_

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {

// One parameter or buffer of the archive, under its state-dict name.
struct ArchiveWeight {
  std::string name;  // "layer1.0.bn1.running_mean"
  at::Tensor value;  // CPU, contiguous, requires_grad false
  bool is_parameter = false;
  bool requires_grad = false;  // what the exported module had (a frozen parameter: false)
};

struct ExportArchive {
  std::string path;
  std::string torch_version;           // of the program that wrote it ("2.11.0+cu130")
  nlohmann::json train;                // the training program's "graph_module"
  std::optional<nlohmann::json> eval;  // the evaluation program's, when the archive has one
  // The training program's weights: parameters in their order, then buffers in theirs.
  std::vector<ArchiveWeight> weights;
  // The tensor constants each program reads (tensors its forward made, which torch.export
  // lifts into the archive: Swin's window indices), by their constant name. Not weights:
  // never trained, never in the state dict.
  std::vector<ArchiveWeight> train_constants;
  std::vector<ArchiveWeight> eval_constants;
};

// The torch release whose graphs Stoker runs ("2.11"); an archive written by another is
// refused, since the ATen operator set and its schemas change between releases.
inline constexpr char kExportTorchRelease[] = "2.11";

// Reads the archive at `path` whole (ReadModelFile, trainer/nn/model_file.h: a file that
// cannot be read, or over the size cap) and parses it (ParseExportArchive).
absl::StatusOr<ExportArchive> ReadExportArchive(const std::string& path);

// The archive in `bytes`, the content of the file `path`: Note [Untrusted model files]
// (trainer/nn/model_file.h). InvalidArgument tagged kExitUsage naming the file when it is
// truncated or not a zip file, not a torch.export archive (no `archive_format` "pt2", no
// program), of an unknown archive or schema version, written by another torch release, when
// a record claims more bytes than the archive holds, a JSON record is not an object or a
// field has the wrong type, or when its weights are missing, pickled (tensor subclasses), of
// negative or overflowing sizes, strides or offset, or of the wrong size.
absl::StatusOr<ExportArchive> ParseExportArchive(const std::string& path, const std::string& bytes);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_EXPORT_ARCHIVE_H_
