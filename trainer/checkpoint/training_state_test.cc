// A checkpoint restores model, optimizer, scaler, generator and FP8 scaling state exactly,
// and a resume that could not continue the same run is refused with the reason.
#include "trainer/checkpoint/training_state.h"

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/training_run_testing.h"
#include "trainer/nn/builtin_models.h"
#include "trainer/nn/fp8_state.h"
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

// small_cnn with the FP8 scaling state of `layers` layers, "fc<i>.weight" (as GraphModel's
// with --precision=fp8, whose calls on the CPU never use it), placed on the CPU or not.
class Fp8Model : public ImageClassifier {
 public:
  Fp8Model(int layers, int history, bool placed)
      : net_(register_module("net", *MakeBuiltinModel("small_cnn", 4))) {
    for (int i = 0; i < layers; ++i) {
      states_.push_back(c10::make_intrusive<Fp8LinearState>(Fp8Recipe{history, 0, false},
                                                            absl::StrCat("fc", i, ".weight")));
      if (placed) states_.back()->PlaceOn(at::kCPU);
    }
  }
  torch::Tensor forward(torch::Tensor images) override { return net_->forward(images); }
  std::vector<c10::intrusive_ptr<Fp8LinearState>> Fp8States() override { return states_; }

  // Values a run could have reached: every amax, scale and inverse set.
  void Train() {
    for (const auto& state : states_) state->scaling().copy_(at::rand(state->scaling().sizes()));
  }

 private:
  std::shared_ptr<ImageClassifier> net_;
  std::vector<c10::intrusive_ptr<Fp8LinearState>> states_;
};

struct Fp8Run {
  std::shared_ptr<Fp8Model> model;
  TrainedRun run;
};

// layers == 0: a run without FP8.
Fp8Run MakeFp8Run(int layers, int history = 4, bool placed = true) {
  torch::manual_seed(1);
  auto model = std::make_shared<Fp8Model>(layers, history, placed);
  LossScalerOptions scaler_options;
  scaler_options.enabled = false;
  return Fp8Run{model, testing::MakeTrainingRun(model, scaler_options)};
}

CheckpointReader Checkpoint(TrainedRun& run, const std::string& source) {
  auto bytes = EncodeCheckpoint(run.refs(), {0, 2, 2}, Geometry());
  EXPECT_OK(bytes);
  auto checkpoint = CheckpointReader::Parse(*bytes, source);
  EXPECT_OK(checkpoint);
  return std::move(*checkpoint);
}

void ExpectPrimed(Fp8LinearState& state, bool primed) {
  for (Fp8Role role : {Fp8Role::kInput, Fp8Role::kWeight, Fp8Role::kGradOutput}) {
    EXPECT_EQ(state.primed(role), primed) << state.name() << " role " << static_cast<int>(role);
  }
}

// Note [FP8 scaling state in checkpoints] (trainer/nn/fp8_state.h).
TEST(TrainingStateTest, Fp8StateIsSavedUnderItsLayersNamesOutsideTheStateDict) {
  Fp8Run original = MakeFp8Run(2);
  original.model->Train();
  const CheckpointReader checkpoint = Checkpoint(original.run, "ckpt-fp8");
  for (const char* name : {"fp8/fc0.weight/scaling", "fp8/fc1.weight/scaling"}) {
    ASSERT_OK_AND_ASSIGN(CheckpointTensor stored, checkpoint.Tensor(name));
    EXPECT_EQ(stored.dtype, "float32");
    EXPECT_EQ(stored.shape, (std::vector<int64_t>{3, 7}));
  }
  for (const auto& [name, tensor] : StateDictItems(*original.model)) {
    EXPECT_FALSE(absl::StrContains(name, "fp8")) << name << ": the state dict has FP8 state";
  }
}

TEST(TrainingStateTest, RestoredFp8StateIsTheSavedOnePrimed) {
  Fp8Run original = MakeFp8Run(2);
  original.model->Train();
  const CheckpointReader checkpoint = Checkpoint(original.run, "ckpt-fp8");
  // Not placed: the restore makes the state, on the device of the model's parameters.
  Fp8Run restored = MakeFp8Run(2, 4, /*placed=*/false);
  std::string note;
  ASSERT_OK(RestoreTrainingState(checkpoint, restored.run.refs(), &note));
  EXPECT_THAT(note, HasSubstr("restored the FP8 scaling state of 2 of 2 layers from ckpt-fp8"));
  const auto saved = original.model->Fp8States(), got = restored.model->Fp8States();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i]->scaling().defined()) << got[i]->name();
    EXPECT_TRUE(got[i]->scaling().is_cpu());
    EXPECT_TRUE(at::equal(got[i]->scaling(), saved[i]->scaling())) << got[i]->name();
    ExpectPrimed(*got[i], true);
  }
}

TEST(TrainingStateTest, RestoreWritesFp8StateInPlace) {
  Fp8Run original = MakeFp8Run(1);
  original.model->Train();
  const CheckpointReader checkpoint = Checkpoint(original.run, "ckpt-fp8");
  Fp8Run restored = MakeFp8Run(1);
  // A captured CUDA graph reads the state at its address.
  const void* address = restored.model->Fp8States()[0]->scaling().data_ptr();
  ASSERT_OK(RestoreTrainingState(checkpoint, restored.run.refs()));
  EXPECT_EQ(restored.model->Fp8States()[0]->scaling().data_ptr(), address);
  EXPECT_TRUE(at::equal(restored.model->Fp8States()[0]->scaling(),
                        original.model->Fp8States()[0]->scaling()));
}

TEST(TrainingStateTest, ASnapshotHoldsTheFp8StateOfItsStep) {
  Fp8Run run = MakeFp8Run(2);
  run.model->Train();
  const RunPosition position{0, 2, 2};
  ASSERT_OK_AND_ASSIGN(const std::string then,
                       EncodeCheckpoint(run.run.refs(), position, Geometry()));
  ASSERT_OK_AND_ASSIGN(CheckpointWriter snapshot,
                       SnapshotCheckpoint(run.run.refs(), position, Geometry(),
                                          /*own_copies=*/true));
  run.model->Train();  // the next step's forward and backward
  const SealedCheckpoint sealed = std::move(snapshot).Seal();
  std::string written;
  for (absl::string_view part : sealed.parts()) written.append(part.data(), part.size());
  EXPECT_EQ(written, then) << "the snapshot changed with the FP8 state after it";
}

TEST(TrainingStateTest, ACheckpointWithoutFp8StateLeavesItFreshAndSaysSo) {
  Fp8Run plain = MakeFp8Run(0);
  const CheckpointReader checkpoint = Checkpoint(plain.run, "ckpt-bf16");
  Fp8Run fp8 = MakeFp8Run(2);
  std::string note;
  ASSERT_OK(RestoreTrainingState(checkpoint, fp8.run.refs(), &note));
  EXPECT_THAT(note,
              AllOf(HasSubstr("ckpt-bf16 holds no FP8 scaling state"), HasSubstr("starts afresh")));
  for (const auto& state : fp8.model->Fp8States()) {
    ExpectPrimed(*state, false);
    EXPECT_EQ(state->scale(Fp8Role::kInput).item<float>(), 1.0f);
    EXPECT_TRUE(at::equal(state->amax_history(Fp8Role::kWeight), at::zeros({4})));
  }
}

TEST(TrainingStateTest, Fp8StateIsIgnoredByARunWithoutFp8AndSaysSo) {
  Fp8Run fp8 = MakeFp8Run(2);
  fp8.model->Train();
  const CheckpointReader checkpoint = Checkpoint(fp8.run, "ckpt-fp8");
  Fp8Run plain = MakeFp8Run(0);
  std::string note;
  ASSERT_OK(RestoreTrainingState(checkpoint, plain.run.refs(), &note));
  EXPECT_THAT(note, AllOf(HasSubstr("ckpt-fp8 holds the FP8 scaling state of 2 layers"),
                          HasSubstr("not --precision=fp8: ignored")));
  // Neither has FP8 state: nothing to say.
  const CheckpointReader plain_checkpoint = Checkpoint(plain.run, "ckpt-bf16");
  ASSERT_OK(RestoreTrainingState(plain_checkpoint, plain.run.refs(), &note));
  EXPECT_EQ(note, "");
}

TEST(TrainingStateTest, Fp8StateOfAnotherAmaxHistoryIsRefusedNamingTheTensorAndTheFlag) {
  Fp8Run saved = MakeFp8Run(1, /*history=*/4);
  const CheckpointReader checkpoint = Checkpoint(saved.run, "ckpt-fp8");
  Fp8Run longer = MakeFp8Run(1, /*history=*/8);
  EXPECT_THAT(RestoreTrainingState(checkpoint, longer.run.refs()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ckpt-fp8: fp8/fc0.weight/scaling is [3, 7]"),
                             HasSubstr("an FP8 amax history of 4 values"),
                             HasSubstr("this run has --fp8_amax_history=8 ([3, 11])"),
                             HasSubstr("resume with --fp8_amax_history=4"))));
}

TEST(TrainingStateTest, Fp8LayersTheCheckpointLacksStartFreshAndItsOthersAreIgnored) {
  Fp8Run two = MakeFp8Run(2);
  two.model->Train();
  const CheckpointReader checkpoint = Checkpoint(two.run, "ckpt-fp8");
  Fp8Run three = MakeFp8Run(3);
  std::string note;
  ASSERT_OK(RestoreTrainingState(checkpoint, three.run.refs(), &note));
  EXPECT_THAT(note, AllOf(HasSubstr("2 of 3 layers"), HasSubstr("starting afresh: fc2.weight")));
  ExpectPrimed(*three.model->Fp8States()[1], true);
  ExpectPrimed(*three.model->Fp8States()[2], false);

  Fp8Run one = MakeFp8Run(1);
  ASSERT_OK(RestoreTrainingState(checkpoint, one.run.refs(), &note));
  EXPECT_THAT(note, AllOf(HasSubstr("1 of 1 layers"),
                          HasSubstr("does not have, ignored: fp8/fc1.weight/scaling")));
}

}  // namespace
}  // namespace stoker::trainer
