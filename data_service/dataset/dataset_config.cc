#include "data_service/dataset/dataset_config.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/dataset/packed_dataset.h"
#include "data_service/dataset/synthetic_dataset.h"

namespace stoker::data_service {
namespace {

absl::Status Prefixed(absl::string_view flag, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(flag, ": ", status.message()));
}

}  // namespace

absl::StatusOr<Datasets> OpenDatasets(const DatasetConfig& config) {
  Datasets datasets;
  if (config.kind == "synthetic") {
    if (config.synthetic_samples < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--synthetic_samples: must be at least 1, got ", config.synthetic_samples));
    }
    SyntheticOptions options;
    options.samples = config.synthetic_samples;
    options.classes = config.synthetic_classes;
    options.data_seed = config.data_seed;
    auto train = SyntheticDataset::Create(options);
    if (!train.ok()) return Prefixed("--synthetic_classes", train.status());
    options.samples = std::max<int64_t>(1, config.synthetic_samples / 10);
    options.validation = true;
    auto val = SyntheticDataset::Create(options);
    if (!val.ok()) return Prefixed("--synthetic_classes", val.status());
    datasets.train = std::move(*train);
    datasets.val = std::move(*val);
    return datasets;
  }
  if (config.kind == "imagefolder" || config.kind == "packed") {
    const bool packed = config.kind == "packed";
    auto open = [packed, &config](
                    const std::string& path) -> absl::StatusOr<std::shared_ptr<const Dataset>> {
      if (packed) {
        absl::StatusOr<std::unique_ptr<PackedDataset>> dataset = PackedDataset::Open(path);
        if (!dataset.ok()) return dataset.status();
        return std::shared_ptr<const Dataset>(std::move(*dataset));
      }
      absl::StatusOr<std::unique_ptr<ImageFolderDataset>> dataset =
          ImageFolderDataset::Open(path, config.image_folder);
      if (!dataset.ok()) return dataset.status();
      return std::shared_ptr<const Dataset>(std::move(*dataset));
    };
    if (config.train_dir.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--train_dir: required with --dataset=", config.kind,
                       packed ? " (the training index file)" : ""));
    }
    auto train = open(config.train_dir);
    if (!train.ok()) return Prefixed("--train_dir", train.status());
    datasets.train = std::move(*train);
    if (!config.val_dir.empty()) {
      auto val = open(config.val_dir);
      if (!val.ok()) return Prefixed("--val_dir", val.status());
      if ((*val)->num_classes() != datasets.train->num_classes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--val_dir: ", config.val_dir, " has ", (*val)->num_classes(),
            " classes but --train_dir ", config.train_dir, " has ", datasets.train->num_classes()));
      }
      datasets.val = std::move(*val);
    }
    return datasets;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--dataset: must be synthetic, imagefolder or packed, got \"", config.kind, "\""));
}

}  // namespace stoker::data_service
