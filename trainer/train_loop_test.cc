// RunTraining driven on the CPU with the in-process fake communicator and a fake input:
// every batch of every epoch trains in order, accumulation, validation counting, stop and
// resume, and failures (a libtorch error inside a step, a failed collective) coming back
// as a Status.
#include "trainer/train_loop.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "trainer/comm/fake_communicator.h"

namespace stoker::trainer {
namespace {

constexpr int kClasses = 10;
constexpr int kImage = 16;

// Batch `step` of `epoch`: images and labels that depend on both (varied batches, the same
// on every run), numbered like the data service's.
TrainingBatch MakeBatch(int64_t epoch, int64_t step, int batch_size, int label_offset = 0) {
  at::Generator generator =
      at::detail::createCPUGenerator(static_cast<uint64_t>(1000 * epoch + step + 1));
  TrainingBatch batch;
  batch.images = at::randn({batch_size, 3, kImage, kImage}, generator, at::kFloat)
                     .contiguous(at::MemoryFormat::ChannelsLast);
  batch.labels = at::randint(0, kClasses, {batch_size}, generator, at::kLong) + label_offset;
  batch.epoch = epoch;
  batch.step = step;
  batch.count = batch_size;
  return batch;
}

// Hands out batches in (epoch, step) order from a start position, and records them.
class ListFeeder final : public BatchFeeder {
 public:
  ListFeeder(int64_t batches_per_epoch, int batch_size, int64_t epoch, int64_t step,
             int label_offset, std::vector<std::pair<int64_t, int64_t>>* seen)
      : batches_per_epoch_(batches_per_epoch),
        batch_size_(batch_size),
        epoch_(epoch),
        step_(step),
        label_offset_(label_offset),
        seen_(seen) {}
  absl::StatusOr<TrainingBatch> Next() override {
    TrainingBatch batch = MakeBatch(epoch_, step_, batch_size_, label_offset_);
    if (seen_ != nullptr) seen_->emplace_back(epoch_, step_);
    if (++step_ == batches_per_epoch_) step_ = 0, ++epoch_;
    return batch;
  }

 private:
  int64_t batches_per_epoch_;
  int batch_size_;
  int64_t epoch_, step_;
  int label_offset_;
  std::vector<std::pair<int64_t, int64_t>>* seen_;
};

// A validation split of `samples` samples in batches of `batch_size`, padded by wrap-around
// as DistributedSampler pads it (one rank here).
class ValidationFeeder final : public BatchFeeder {
 public:
  ValidationFeeder(int64_t epoch, int samples, int batch_size)
      : epoch_(epoch), samples_(samples), batch_size_(batch_size) {}
  absl::StatusOr<TrainingBatch> Next() override {
    TrainingBatch batch = MakeBatch(100 + epoch_, step_, batch_size_);
    batch.epoch = epoch_;
    batch.step = step_;
    for (int i = 0; i < batch_size_; ++i)
      batch.sample_indices.push_back((step_ * batch_size_ + i) % samples_);
    ++step_;
    return batch;
  }

 private:
  int64_t epoch_;
  int samples_;
  int batch_size_;
  int64_t step_ = 0;
};

struct FakeInputSpec {
  int64_t batches_per_epoch = 5;
  int batch_size = 8;
  int label_offset = 0;  // labels past the classes make the loss fail inside libtorch
  int val_samples = 0;   // 0: no validation split
  int val_batch_size = 4;
};

class FakeInput final : public RunInput {
 public:
  FakeInput(const FakeInputSpec& spec, const InputStart& start,
            std::vector<std::pair<int64_t, int64_t>>* seen)
      : spec_(spec),
        start_epoch_(start.epoch),
        first_(start.samples_done / spec.batch_size),
        feeder_(spec.batches_per_epoch, spec.batch_size, start.epoch, first_, spec.label_offset,
                seen) {}
  int64_t batches_per_epoch() const override { return spec_.batches_per_epoch; }
  int64_t trained_per_epoch() const override { return spec_.batches_per_epoch; }
  EpochBatches BatchesOf(int64_t epoch) const override {
    return {epoch == start_epoch_ ? first_ : 0, spec_.batches_per_epoch, spec_.batches_per_epoch};
  }
  BatchFeeder& feeder() override { return feeder_; }
  absl::Status PrefetchEpoch(int64_t) override { return absl::OkStatus(); }
  bool has_validation() const override { return spec_.val_samples > 0; }
  absl::StatusOr<ValidationPass> StartValidation(int64_t epoch) override {
    ValidationPass pass;
    pass.batch_size = spec_.val_batch_size;
    pass.batches = (spec_.val_samples + spec_.val_batch_size - 1) / spec_.val_batch_size;
    pass.feeder =
        std::make_unique<ValidationFeeder>(epoch, spec_.val_samples, spec_.val_batch_size);
    return pass;
  }

 private:
  FakeInputSpec spec_;
  int64_t start_epoch_;
  int64_t first_;  // batches of the start epoch already trained (one rank)
  ListFeeder feeder_;
};

class TrainLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(temp_dir_, stoker::testing::TempDir::Create("train_loop_test"));
    dir_ = temp_dir_.path();
    options_.input.data_socket = "(fake input)";
    options_.input.batch_size = spec_.batch_size;
    options_.input.image_size = kImage;
    options_.model.name = "small_cnn";
    options_.model.num_classes = kClasses;
    options_.epochs = 2;
    options_.seed = 7;
    options_.optimizer.learning_rate = 0.05;
    options_.benchmark.warmup_steps = 1;
    options_.report.progress = ProgressMode::kLines;
    options_.report.log_every = 2;
    options_.report.metrics_out = dir_ + "/metrics.json";
    options_.report.loss_log = dir_ + "/losses.txt";
    options_.checkpoint.resume.mode = ResumeFrom::Mode::kNone;
    context_.rank.rank = 0;
    context_.rank.world_size = 1;
  }

  absl::StatusOr<TrainingOutcome> Run() {
    std::vector<std::unique_ptr<FakeCommunicator>> group = FakeCommunicator::Group(1);
    communicator_ = std::move(group[0]);
    return RunWithCommunicator(*communicator_);
  }

  absl::StatusOr<TrainingOutcome> RunWithCommunicator(Communicator& communicator) {
    const FakeInputSpec spec = spec_;
    return RunTraining(options_, context_, communicator, communicator,
                       [this, spec](const InputStart& start) {
                         return absl::StatusOr<std::unique_ptr<RunInput>>(
                             std::make_unique<FakeInput>(spec, start, &seen_));
                       });
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  stoker::testing::TempDir temp_dir_;
  std::string dir_;
  FakeInputSpec spec_;
  TrainerOptions options_;
  RunContext context_;
  std::unique_ptr<FakeCommunicator> communicator_;
  std::vector<std::pair<int64_t, int64_t>> seen_;
};

TEST_F(TrainLoopTest, TrainsEveryBatchOfEveryEpochInOrder) {
  absl::StatusOr<TrainingOutcome> outcome = Run();
  ASSERT_OK(outcome);
  EXPECT_EQ(outcome->end, TrainingOutcome::End::kFinished);
  std::vector<std::pair<int64_t, int64_t>> expected;
  for (int64_t e = 0; e < 2; ++e) {
    for (int64_t s = 0; s < 5; ++s) expected.emplace_back(e, s);
  }
  EXPECT_EQ(seen_, expected);
  // One loss line per batch, each finite.
  std::istringstream losses(Read("losses.txt"));
  int lines = 0;
  for (int64_t epoch, step; losses >> epoch >> step;) {
    double loss = 0;
    losses >> loss;
    EXPECT_TRUE(std::isfinite(loss)) << epoch << " " << step;
    EXPECT_EQ(epoch * 5 + step, lines);
    ++lines;
  }
  EXPECT_EQ(lines, 10);
  EXPECT_NE(Read("metrics.json").find("\"global_step\": 10"), std::string::npos)
      << Read("metrics.json");
}

TEST_F(TrainLoopTest, AccumulationTakesOneOptimizerStepPerGroupOfMicroBatches) {
  options_.step.accumulate = 2;  // 5 batches: groups of 2, 2 and 1
  absl::StatusOr<TrainingOutcome> outcome = Run();
  ASSERT_OK(outcome);
  EXPECT_EQ(seen_.size(), 10u);
  EXPECT_NE(Read("metrics.json").find("\"global_step\": 6"), std::string::npos)
      << Read("metrics.json");
}

TEST_F(TrainLoopTest, ValidationCountsEachSampleOnceAlthoughTheSplitIsPadded) {
  spec_.val_samples = 10;  // 3 batches of 4: the last two samples repeat the first two
  absl::StatusOr<TrainingOutcome> outcome = Run();
  ASSERT_OK(outcome);
  EXPECT_NE(Read("metrics.json").find("\"val_samples\": 10"), std::string::npos)
      << Read("metrics.json");
}

TEST_F(TrainLoopTest, StopAfterStepsThenResumeGivesTheUninterruptedRunsWeights) {
  options_.report.final_params_out = dir_ + "/straight";
  ASSERT_OK(Run());
  const std::string straight = Read("straight.rank0");
  ASSERT_FALSE(straight.empty());

  seen_.clear();
  options_.report.final_params_out = dir_ + "/resumed";
  options_.checkpoint.dir = dir_ + "/checkpoints";
  options_.checkpoint.stop_after_steps = 3;
  absl::StatusOr<TrainingOutcome> stopped = Run();
  ASSERT_OK(stopped);
  EXPECT_EQ(stopped->end, TrainingOutcome::End::kStopAfterSteps);
  EXPECT_EQ(ExitCodeFor(*stopped), kExitStoppedEarly);
  EXPECT_NE(stopped->checkpoint.find("/checkpoints/"), std::string::npos) << stopped->checkpoint;
  EXPECT_EQ(seen_.size(), 3u);

  seen_.clear();
  options_.checkpoint.stop_after_steps = 0;
  options_.checkpoint.resume.mode = ResumeFrom::Mode::kAuto;
  absl::StatusOr<TrainingOutcome> resumed = Run();
  ASSERT_OK(resumed);
  EXPECT_EQ(resumed->end, TrainingOutcome::End::kFinished);
  ASSERT_FALSE(seen_.empty());
  EXPECT_EQ(seen_.front(),
            std::make_pair(int64_t{0}, int64_t{3}));  // continues after the third batch
  EXPECT_EQ(seen_.size(), 7u);
  EXPECT_TRUE(Read("resumed.rank0") == straight)
      << "the resumed run's weights differ from the uninterrupted run's";
}

TEST_F(TrainLoopTest, ALibtorchErrorInsideAStepComesBackAsAStatusNamingTheStep) {
  spec_.label_offset = kClasses;  // every label out of range: cross-entropy fails inside libtorch
  absl::StatusOr<TrainingOutcome> outcome = Run();
  ASSERT_FALSE(outcome.ok());
  const std::string message(outcome.status().message());
  EXPECT_NE(message.find("libtorch"), std::string::npos) << message;
  EXPECT_NE(message.find("step"), std::string::npos) << message;
}

TEST_F(TrainLoopTest, AFailedCollectiveFailsTheRunWithItsStatus) {
  std::vector<std::unique_ptr<FakeCommunicator>> group = FakeCommunicator::Group(1);
  group[0]->fail_next(absl::UnavailableError("injected: the peer is gone"));
  absl::StatusOr<TrainingOutcome> outcome = RunWithCommunicator(*group[0]);
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(std::string(outcome.status().message()).find("injected: the peer is gone"),
            std::string::npos)
      << outcome.status();
}

}  // namespace
}  // namespace stoker::trainer
