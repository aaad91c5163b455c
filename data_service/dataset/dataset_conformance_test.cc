// The conformance suite of the Dataset interface, run against every implementation:
// labels in range, deterministic bytes, safe concurrent loads, errors naming the sample.
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "data_service/dataset/dataset.h"
#include "data_service/dataset/dataset_config.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/dataset/packed_dataset.h"
#include "data_service/dataset/packed_writer.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kSize = 12;

struct Implementation {
  std::string name;
  std::shared_ptr<const Dataset> (*make)();
};

std::shared_ptr<const Dataset> MakeSynthetic() {
  return std::shared_ptr<const Dataset>(std::move(*SyntheticDataset::Create({40, 5, 9})));
}

std::shared_ptr<const Dataset> MakeImageFolder() {
  const std::string root = test_util::TestDirectory("conformance_folder");
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> rgb(24 * 18 * 3);
      for (size_t p = 0; p < rgb.size(); ++p) rgb[p] = static_cast<uint8_t>(p * (c + 1) + i * 50);
      const std::string dir = root + "/class" + std::to_string(c);
      std::filesystem::create_directories(dir);
      EXPECT_OK(test_util::WriteJpeg(dir + "/" + std::to_string(i) + ".jpg", 24, 18, rgb));
    }
  }
  return std::shared_ptr<const Dataset>(std::move(*ImageFolderDataset::Open(root)));
}

std::shared_ptr<const Dataset> MakePacked() {
  MakeImageFolder();
  const std::string index = test_util::TestDirectory("conformance_packed") + "/folder.stkpack";
  PackOptions options;
  options.shard_bytes = 2000;  // several shards
  auto stats = PackImageFolder(test_util::TestDirectory("conformance_folder"), index, options);
  EXPECT_OK(stats);
  EXPECT_GT(stats->shards, 1);
  return std::shared_ptr<const Dataset>(std::move(*PackedDataset::Open(index)));
}

class DatasetConformanceTest : public ::testing::TestWithParam<Implementation> {
 protected:
  void SetUp() override { dataset_ = GetParam().make(); }
  std::vector<uint8_t> Load(int64_t index, uint64_t seed = 1, int64_t epoch = 0) {
    std::vector<uint8_t> image(kSize * kSize * 3, 0);
    SampleScratch scratch;
    absl::Status s = dataset_->Load(index, {kSize, true, seed, epoch}, scratch, image.data());
    EXPECT_OK(s);
    return image;
  }
  std::shared_ptr<const Dataset> dataset_;
};

TEST_P(DatasetConformanceTest, LabelsAreInRange) {
  ASSERT_GE(dataset_->size(), 1);
  ASSERT_GE(dataset_->num_classes(), 1);
  for (int64_t i = 0; i < dataset_->size(); ++i) {
    EXPECT_GE(dataset_->Label(i), 0);
    EXPECT_LT(dataset_->Label(i), dataset_->num_classes());
  }
}

TEST_P(DatasetConformanceTest, LoadIsAPureFunctionOfIndexAndOptions) {
  for (int64_t i = 0; i < dataset_->size(); i += 3) EXPECT_EQ(Load(i), Load(i)) << i;
  EXPECT_NE(Load(0), Load(dataset_->size() - 1));
}

TEST_P(DatasetConformanceTest, ConcurrentLoadsGiveTheSameBytesAsSerialOnes) {
  std::vector<std::vector<uint8_t>> serial;
  for (int64_t i = 0; i < dataset_->size(); ++i) serial.push_back(Load(i));
  std::vector<std::vector<uint8_t>> parallel(dataset_->size(),
                                             std::vector<uint8_t>(kSize * kSize * 3));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      SampleScratch scratch;  // one per thread, reused
      for (int64_t i = t; i < dataset_->size(); i += 4) {
        EXPECT_OK(dataset_->Load(i, {kSize, true, 1, 0}, scratch, parallel[i].data()));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(serial, parallel);
}

TEST_P(DatasetConformanceTest, OutOfRangeIndexIsAnErrorNotACrash) {
  std::vector<uint8_t> image(kSize * kSize * 3);
  SampleScratch scratch;
  absl::Status past_end =
      dataset_->Load(dataset_->size(), {kSize, true, 0, 0}, scratch, image.data());
  EXPECT_THAT(past_end, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_FALSE(IsBadSampleError(past_end)) << "a bad index is not a bad file";
  EXPECT_THAT(dataset_->Load(-1, {kSize, true, 0, 0}, scratch, image.data()),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_FALSE(dataset_->Describe(0).empty());
}

TEST_P(DatasetConformanceTest, EvaluationDoesNotDependOnTheSeedOrTheEpoch) {
  std::vector<uint8_t> eval(kSize * kSize * 3), eval2(kSize * kSize * 3);
  SampleScratch scratch;
  ASSERT_OK(dataset_->Load(1, {kSize, false, 5, 0}, scratch, eval.data()));
  ASSERT_OK(dataset_->Load(1, {kSize, false, 6, 3}, scratch, eval2.data()));
  EXPECT_EQ(eval, eval2);
}

TEST_P(DatasetConformanceTest, OptionsThatNoImageCanSatisfyAreNotBadSamples) {
  std::vector<uint8_t> image(kSize * kSize * 3);
  SampleScratch scratch;
  absl::Status status = dataset_->Load(0, {0, true, 0, 0}, scratch, image.data());
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(IsBadSampleError(status)) << status;
}

INSTANTIATE_TEST_SUITE_P(AllDatasets, DatasetConformanceTest,
                         ::testing::Values(Implementation{"Synthetic", &MakeSynthetic},
                                           Implementation{"ImageFolder", &MakeImageFolder},
                                           Implementation{"Packed", &MakePacked}),
                         [](const ::testing::TestParamInfo<Implementation>& info) {
                           return info.param.name;
                         });

TEST(OpenDatasetsTest, ErrorsNameTheFlag) {
  DatasetConfig config;
  config.kind = "lmdb";
  EXPECT_NE(OpenDatasets(config).status().message().find("--dataset"), std::string::npos);
  config.kind = "imagefolder";
  EXPECT_NE(OpenDatasets(config).status().message().find("--train_dir"), std::string::npos);
  config.kind = "packed";
  EXPECT_NE(OpenDatasets(config).status().message().find("--train_dir"), std::string::npos);
  config.train_dir = "/nonexistent/stoker/train.stkpack";
  EXPECT_THAT(OpenDatasets(config),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("--train_dir")));
  config.kind = "imagefolder";
  config.train_dir.clear();
  config.train_dir = "/nonexistent/stoker/train";
  auto missing = OpenDatasets(config);
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound, HasSubstr("--train_dir")));
  config.kind = "synthetic";
  config.synthetic_samples = 0;
  EXPECT_NE(OpenDatasets(config).status().message().find("--synthetic_samples"), std::string::npos);
  config.synthetic_samples = 10;
  config.synthetic_classes = 0;
  EXPECT_NE(OpenDatasets(config).status().message().find("--synthetic_classes"), std::string::npos);
}

TEST(OpenDatasetsTest, SyntheticHasATenthForValidation) {
  DatasetConfig config;
  config.synthetic_samples = 250;
  auto datasets = OpenDatasets(config);
  ASSERT_OK(datasets);
  EXPECT_EQ(datasets->train->size(), 250);
  ASSERT_NE(datasets->val, nullptr);
  EXPECT_EQ(datasets->val->size(), 25);
}

TEST(OpenDatasetsTest, ImageFolderWithoutValDirHasNoValidationSplit) {
  MakeImageFolder();
  DatasetConfig config;
  config.kind = "imagefolder";
  config.train_dir = test_util::TestDirectory("conformance_folder");
  auto datasets = OpenDatasets(config);
  ASSERT_OK(datasets);
  EXPECT_EQ(datasets->train->size(), 12);
  EXPECT_EQ(datasets->val, nullptr);
  config.val_dir = config.train_dir;
  datasets = OpenDatasets(config);
  ASSERT_OK(datasets);
  EXPECT_NE(datasets->val, nullptr);
  EXPECT_NE(datasets->val, datasets->train) << "each split has its own reader";
}

TEST(OpenDatasetsTest, PackedOpensIndexFilesForBothSplits) {
  MakePacked();
  DatasetConfig config;
  config.kind = "packed";
  config.train_dir = test_util::TestDirectory("conformance_packed") + "/folder.stkpack";
  config.val_dir = config.train_dir;
  auto datasets = OpenDatasets(config);
  ASSERT_OK(datasets);
  EXPECT_EQ(datasets->train->size(), 12);
  ASSERT_NE(datasets->val, nullptr);
  EXPECT_NE(datasets->val, datasets->train);
  // A folder is not an index.
  config.val_dir = test_util::TestDirectory("conformance_folder");
  auto folder = OpenDatasets(config);
  EXPECT_THAT(folder, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--val_dir")));
}

}  // namespace
}  // namespace stoker::data_service
