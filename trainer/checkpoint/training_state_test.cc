// A checkpoint restores model, optimizer, scaler and generator state exactly, and a resume
// that could not continue the same run is refused with the reason.
#include "trainer/checkpoint/training_state.h"

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/training_run_testing.h"
#include "trainer/nn/builtin_models.h"
#include "trainer/nn/state_dict.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

using TrainedRun = testing::TrainingRun;

TrainedRun MakeRun(uint64_t seed, bool scaling) {
  torch::manual_seed(seed);
  LossScalerOptions scaler_options;
  scaler_options.enabled = scaling;
  scaler_options.init_scale = 1024;
  return testing::MakeTrainingRun(*MakeBuiltinModel("small_cnn", 4), scaler_options);
}

void TrainSteps(TrainedRun& run, int steps) {
  for (int i = 0; i < steps; ++i) {
    for (const at::Tensor& p : run.model->parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor x = at::randn({8, 3, 16, 16});
    at::Tensor y = at::randint(0, 4, {8}, at::kLong);
    run.scaler.Scale(at::cross_entropy_loss(run.model->forward(x), y)).backward();
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : run.model->parameters()) grads.push_back(p.grad());
    ASSERT_OK(run.scaler.Unscale(grads));
    ASSERT_TRUE(run.scaler
                    .Step([&] {
                      run.optimizer->Step();
                      return absl::OkStatus();
                    })
                    .ok());
    ASSERT_OK(run.scaler.Update());
  }
}

RunGeometry Geometry() {
  return RunGeometry{/*model=*/"small_cnn", /*num_classes=*/4, /*image_size=*/16,
                     /*world_size=*/2,      /*batch_size=*/8,  /*accumulate=*/1,
                     /*optimizer=*/"adamw", /*seed=*/77};
}

TEST(TrainingStateTest, RestoredRunContinuesBitForBit) {
  TrainedRun original = MakeRun(1, /*scaling=*/true);
  TrainSteps(original, 3);
  RunPosition position{2, 5, 3, /*samples_done=*/80, /*global_batch=*/16};
  auto bytes = EncodeCheckpoint(original.refs(), position, Geometry());
  ASSERT_OK(bytes);
  auto checkpoint = CheckpointReader::Parse(*bytes, "mem");
  ASSERT_OK(checkpoint);

  // The original continues for 2 steps, drawing its batches from the generator.
  TrainSteps(original, 2);

  TrainedRun restored = MakeRun(2, /*scaling=*/true);  // other weights, generator reseeded
  ASSERT_OK(RestoreTrainingState(*checkpoint, restored.refs()));
  EXPECT_EQ(restored.optimizer->steps_taken(), 3);
  auto got_position = CheckpointPosition(*checkpoint);
  ASSERT_OK(got_position);
  EXPECT_EQ(got_position->batches_done, 5);
  EXPECT_EQ(got_position->samples_done, 80);
  EXPECT_EQ(got_position->global_batch, 16);
  auto got_geometry = CheckpointGeometry(*checkpoint);
  ASSERT_OK(got_geometry);
  EXPECT_EQ(got_geometry->seed, 77u);
  // The same 2 steps from the restored state (the generator's too) end in the same bits.
  TrainSteps(restored, 2);
  EXPECT_EQ(restored.scaler.state().scale, original.scaler.state().scale);
  const auto a = StateDictItems(*original.model), b = StateDictItems(*restored.model);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
}

TEST(TrainingStateTest, ASnapshotWithItsOwnCopiesIsUnchangedByTheStepsAfterIt) {
  TrainedRun run = MakeRun(1, /*scaling=*/true);
  TrainSteps(run, 2);
  const RunPosition position{0, 2, 2};
  ASSERT_OK_AND_ASSIGN(const std::string then, EncodeCheckpoint(run.refs(), position, Geometry()));
  ASSERT_OK_AND_ASSIGN(CheckpointWriter snapshot,
                       SnapshotCheckpoint(run.refs(), position, Geometry(), /*own_copies=*/true));
  // The optimizer updates the parameters and its state in place.
  TrainSteps(run, 2);
  ASSERT_OK_AND_ASSIGN(const std::string now, EncodeCheckpoint(run.refs(), position, Geometry()));
  ASSERT_NE(now, then);
  const SealedCheckpoint sealed = std::move(snapshot).Seal();
  std::string written;
  for (absl::string_view part : sealed.parts()) written.append(part.data(), part.size());
  EXPECT_EQ(written, then) << "the snapshot changed with the state after it";
}

TEST(TrainingStateTest, ResumeIsRefusedWhenTheRunCannotContinue) {
  const RunGeometry saved = Geometry();
  RunGeometry other = saved;
  other.model = "resnet18";
  EXPECT_TRUE(
      absl::StrContains(CheckResumable(saved, {1, 0, 10}, other, "ckpt").message(), "--model"));
  other = saved;
  other.world_size = 4;
  other.batch_size = 3;
  other.accumulate = 2;
  EXPECT_OK(CheckResumable(saved, {1, 0, 10}, other, "ckpt")) << "epoch boundary: allowed";
  EXPECT_OK(CheckResumable(saved, {1, 3, 10, 48, 16}, other, "ckpt")) << "mid-epoch: allowed";
  other = saved;
  other.seed = 78;
  EXPECT_OK(CheckResumable(saved, {1, 0, 10}, other, "ckpt")) << "the checkpoint's seed is used";
  EXPECT_THAT(CheckResumable(saved, {1, 3, 10, 48, 16}, other, "ckpt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ckpt stopped in the middle of epoch 2"),
                             HasSubstr("--seed=77"), HasSubstr("--seed=78"))));
  other = saved;
  other.num_classes = 1000;
  EXPECT_TRUE(absl::StrContains(CheckResumable(saved, {1, 0, 10}, other, "ckpt").message(),
                                "--num_classes"));
}

TEST(TrainingStateTest, ResumeMidEpochIsRefusedOnAnotherDataset) {
  RunGeometry saved = Geometry();
  saved.dataset_size = 1000;
  EXPECT_OK(CheckResumableDataset(saved, {1, 3, 10, 48, 16}, 1000, "ckpt"));
  EXPECT_OK(CheckResumableDataset(saved, {1, 0, 10}, 999, "ckpt")) << "epoch boundary: allowed";
  EXPECT_THAT(
      CheckResumableDataset(saved, {1, 3, 10, 48, 16}, 999, "ckpt"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("ckpt stopped in the middle of epoch 2"), HasSubstr("1000 samples"),
                     HasSubstr("serves 999"), HasSubstr("--train_dir"))));
  saved.dataset_size = 0;
  EXPECT_OK(CheckResumableDataset(saved, {1, 3, 10, 48, 16}, 999, "ckpt")) << "size unknown";
}

TEST(TrainingStateTest, ACheckpointWithoutSamplePositionsCountsItsBatches) {
  // Written as checkpoints were before positions were counted in samples.
  CheckpointWriter writer;
  writer.AddString("format", "stoker training checkpoint");
  writer.AddString("geometry/model", "small_cnn");
  writer.AddInt("geometry/num_classes", 4);
  writer.AddInt("geometry/image_size", 16);
  writer.AddInt("geometry/world_size", 3);
  writer.AddInt("geometry/batch_size", 8);
  writer.AddInt("geometry/accumulate", 2);
  writer.AddString("geometry/optimizer", "sgd");
  writer.AddInt("geometry/seed", 5);
  writer.AddInt("position/epoch", 1);
  writer.AddInt("position/batches_done", 6);
  writer.AddInt("position/global_step", 20);
  const std::string bytes = std::move(writer).Finish();
  auto checkpoint = CheckpointReader::Parse(bytes, "old");
  ASSERT_OK(checkpoint);
  auto geometry = CheckpointGeometry(*checkpoint);
  ASSERT_OK(geometry);
  EXPECT_EQ(geometry->dataset_size, 0);
  auto position = CheckpointPosition(*checkpoint);
  ASSERT_OK(position);
  EXPECT_EQ(position->batches_done, 6);
  EXPECT_EQ(position->samples_done, 6 * 3 * 8);
  EXPECT_EQ(position->global_batch, 3 * 8 * 2);
}

TEST(TrainingStateTest, ATensorOfAnotherShapeIsNamed) {
  TrainedRun original = MakeRun(1, false);
  auto bytes = EncodeCheckpoint(original.refs(), {0, 0, 0}, Geometry());
  ASSERT_OK(bytes);
  auto checkpoint = CheckpointReader::Parse(*bytes, "ckpt-x");
  torch::manual_seed(3);
  std::shared_ptr<ImageClassifier> wider = *MakeBuiltinModel("small_cnn", 7);
  TrainedRun other = MakeRun(1, false);
  other.model = wider;
  const absl::Status status = RestoreTrainingState(*checkpoint, other.refs());
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model/fc.weight")));
}

}  // namespace
}  // namespace stoker::trainer
