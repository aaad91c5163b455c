// OpenDatasets: the service's training and validation datasets, from its command-line
// configuration (--dataset, --train_dir, --val_dir, --synthetic_*, --data_seed).
#ifndef STOKER_DATA_SERVICE_DATASET_DATASET_CONFIG_H_
#define STOKER_DATA_SERVICE_DATASET_DATASET_CONFIG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data_service/dataset/dataset.h"
#include "data_service/dataset/image_folder_dataset.h"

namespace stoker::data_service {

struct DatasetConfig {
  std::string kind = "synthetic";  // "synthetic", "imagefolder" or "packed"
  // imagefolder: the split's root folder; packed: its index file. train_dir is required,
  // val_dir optional.
  std::string train_dir;
  std::string val_dir;
  int64_t synthetic_samples = 4096;
  int32_t synthetic_classes = 10;
  uint64_t data_seed = 0;
  // imagefolder: how the folders are listed (--follow_links, --scan_timeout_s).
  ImageFolderOptions image_folder;
};

struct Datasets {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;  // null when there is no validation split
};

// Synthetic: a training split of synthetic_samples and a validation split of
// max(1, synthetic_samples / 10) samples. Imagefolder and packed: train_dir, and val_dir
// if given, each split with its own reader; both must have the same number of classes.
// InvalidArgument / NotFound with a message that starts with the flag at fault
// ("--train_dir: image folder /x does not exist").
absl::StatusOr<Datasets> OpenDatasets(const DatasetConfig& config);

}  // namespace stoker::data_service

#endif  // STOKER_DATA_SERVICE_DATASET_DATASET_CONFIG_H_
