// TrainStep over MPI (2 ranks): gradient accumulation over K micro-batches gives the
// large-batch gradient (a model without batch statistics), with no communication before
// the last micro-batch; clipping and label smoothing match PyTorch's definitions.
#include "trainer/train_step.h"

#include <ATen/ATen.h>
#include <mpi.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/comm/fake_communicator.h"
#include "trainer/comm/mpi_communicator.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;

// No batch statistics: the union's gradient is exactly the mean of the parts' gradients.
class Net final : public ImageClassifier {
 public:
  Net() {
    conv_ = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    fc_ = register_module("fc", torch::nn::Linear(4 * 6 * 6, 5));
  }
  at::Tensor forward(at::Tensor x) override {
    return fc_->forward(conv_->forward(x).relu().flatten(1));
  }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::Linear fc_{nullptr};
};

// Counts the collectives of a communicator from its ledger (TrainStep issues allreduces
// only).
class CollectiveCount {
 public:
  explicit CollectiveCount(Communicator& communicator)
      : ledger_(*communicator.ledger()), before_(ledger_.Read().issued) {}
  int allreduces() const { return static_cast<int>(ledger_.Read().issued - before_); }

 private:
  CollectiveLedger& ledger_;
  const uint64_t before_;
};

struct NetUnderTest {
  std::shared_ptr<Net> net;
  std::vector<at::Tensor> parameters;
  std::vector<std::string> names;
};

NetUnderTest MakeNet() {
  torch::manual_seed(7);
  NetUnderTest s;
  s.net = std::make_shared<Net>();
  for (const auto& item : s.net->named_parameters()) {
    s.names.push_back(item.key());
    s.parameters.push_back(item.value());
  }
  return s;
}

// A TrainStep over `communicator` with the default optimizer and no loss scaling.
struct StepUnderTest {
  explicit StepUnderTest(Communicator* communicator,
                         const TrainStepOptions& options = TrainStepOptions())
      : mine(MakeNet()) {
    auto created = GradBuckets::Create(mine.parameters, mine.names, 1 << 20, communicator);
    EXPECT_TRUE(created.ok()) << created.status();
    buckets = std::move(*created);
    auto sgd = FusedOptimizer::Create(mine.parameters, OptimizerOptions());
    EXPECT_TRUE(sgd.ok()) << sgd.status();
    optimizer = std::move(*sgd);
    LossScalerOptions no_scaling;
    no_scaling.enabled = false;
    scaler = std::make_unique<LossScaler>(*LossScaler::Create(no_scaling));
    step = std::make_unique<TrainStep>(*mine.net, *buckets, *optimizer, *scaler, mine.parameters,
                                       options);
  }
  NetUnderTest mine;
  std::unique_ptr<GradBuckets> buckets;
  std::unique_ptr<FusedOptimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;
  std::unique_ptr<TrainStep> step;
};

TEST(TrainStepTest, AccumulatedMicroBatchesOverRanksGiveTheLargeBatchGradient) {
  auto mpi = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  const int rank = (*mpi)->rank(), world = (*mpi)->world_size();
  CollectiveCount counting(**mpi);
  constexpr int kMicro = 3, kBatch = 4;

  // The global batch, the same on every rank.
  at::manual_seed(123);
  const at::Tensor images = at::randn({world * kMicro * kBatch, 3, 8, 8});
  const at::Tensor labels = at::randint(0, 5, {world * kMicro * kBatch}, at::kLong);

  NetUnderTest mine = MakeNet();
  auto buckets =
      GradBuckets::Create(mine.parameters, mine.names, /*bucket_bytes=*/1024, mpi->get());
  ASSERT_TRUE(buckets.ok()) << buckets.status();
  OptimizerOptions sgd;
  sgd.momentum = 0;
  auto optimizer = FusedOptimizer::Create(mine.parameters, sgd);
  ASSERT_TRUE(optimizer.ok());
  LossScalerOptions no_scaling;
  no_scaling.enabled = false;
  auto scaler = LossScaler::Create(no_scaling);
  ASSERT_TRUE(scaler.ok());
  TrainStep step(*mine.net, **buckets, **optimizer, *scaler, mine.parameters, TrainStepOptions());

  step.Begin(kMicro);
  for (int k = 0; k < kMicro; ++k) {
    const int64_t first = (rank * kMicro + k) * kBatch;
    auto loss = step.MicroBatch(images.narrow(0, first, kBatch), labels.narrow(0, first, kBatch));
    ASSERT_TRUE(loss.ok()) << loss.status();
    if (k + 1 < kMicro) {
      EXPECT_EQ(counting.allreduces(), 0) << "micro-batch " << k << " communicated";
    }
  }
  EXPECT_EQ(counting.allreduces(), static_cast<int>((*buckets)->plan().size()));
  std::vector<at::Tensor> accumulated;
  for (const at::Tensor& p : mine.parameters) accumulated.push_back(p.grad().clone());
  std::vector<at::Tensor> before;
  for (const at::Tensor& p : mine.parameters) before.push_back(p.detach().clone());
  ASSERT_TRUE(step.Finish(/*learning_rate=*/0.5).ok());

  // One process, one batch of world * K * B samples.
  NetUnderTest reference = MakeNet();
  at::cross_entropy_loss(reference.net->forward(images), labels).backward();
  for (size_t i = 0; i < accumulated.size(); ++i) {
    const at::Tensor& expected = reference.parameters[i].grad();
    EXPECT_TRUE(at::allclose(accumulated[i], expected, 1e-5, 1e-6))
        << mine.names[i] << " max diff " << (accumulated[i] - expected).abs().max().item<float>();
    // And the step used it: p' = p - lr * g.
    EXPECT_TRUE(at::allclose(mine.parameters[i].detach(), before[i] - 0.5 * expected, 1e-5, 1e-6));
  }
}

TEST(TrainStepTest, FinishBeforeEveryMicroBatchIsAnError) {
  auto mpi = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(mpi.ok());
  StepUnderTest s(mpi->get());
  s.step->Begin(2);
  EXPECT_TRUE(absl::IsFailedPrecondition(s.step->Finish(0.1)));
}

TEST(ClipGradNormTest, MatchesTorchClipGradNorm) {
  at::manual_seed(5);
  std::vector<at::Tensor> grads = {at::randn({4, 3}) * 3, at::randn({7}), at::randn({2, 2, 2})};
  std::vector<at::Tensor> params;
  for (const at::Tensor& g : grads) {
    at::Tensor p = at::zeros_like(g).requires_grad_();
    p.mutable_grad() = g.clone();
    params.push_back(p);
  }
  const double expected_norm = torch::nn::utils::clip_grad_norm_(params, 1.5);
  const at::Tensor norm = ClipGradNorm(grads, 1.5);
  EXPECT_NEAR(norm.item<double>(), expected_norm, 1e-5);
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_TRUE(at::allclose(grads[i], params[i].grad(), 1e-6, 1e-7));
  // Under the limit: unchanged.
  std::vector<at::Tensor> small = {at::full({3}, 0.1)};
  ClipGradNorm(small, 10.0);
  EXPECT_TRUE(at::allclose(small[0], at::full({3}, 0.1)));
}

TEST(TrainStepTest, LabelSmoothingIsPyTorchs) {
  auto mpi = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(mpi.ok());
  TrainStepOptions options;
  options.label_smoothing = 0.2;
  StepUnderTest s(mpi->get(), options);
  at::manual_seed(9);
  const at::Tensor x = at::randn({6, 3, 8, 8});
  const at::Tensor y = at::randint(0, 5, {6}, at::kLong);
  // By definition: (1 - eps) * NLL + eps * mean over classes of -log p.
  const at::Tensor logp = at::log_softmax(s.mine.net->forward(x).detach(), 1);
  const at::Tensor nll = -logp.gather(1, y.unsqueeze(1)).squeeze(1);
  const at::Tensor uniform = -logp.mean(1);
  const double expected = (0.8 * nll + 0.2 * uniform).mean().item<double>();
  s.step->Begin(1);
  auto loss = s.step->MicroBatch(x, y);
  ASSERT_TRUE(loss.ok());
  EXPECT_NEAR(loss->item<double>(), expected, 1e-5);
  ASSERT_TRUE(s.step->Finish(0.1).ok());
}

// The communicator of OneRankStep, a base so that it outlives the step.
struct OneRank {
  std::vector<std::unique_ptr<FakeCommunicator>> comm = FakeCommunicator::Group(1);
};

// A step over one rank of its own (the fake), for errors that need no peer.
struct OneRankStep : OneRank, StepUnderTest {
  OneRankStep() : StepUnderTest(comm[0].get()) {}
};

TEST(TrainStepTest, ALibtorchErrorInTheLossIsAStatusNamingTheStep) {
  OneRankStep s;
  const at::Tensor images = at::randn({4, 3, 8, 8});
  const at::Tensor labels = at::full({4}, 7, at::kLong);  // the model has 5 classes
  s.step->Begin(2);
  EXPECT_THAT(
      s.step->MicroBatch(images, labels),
      StatusIs(absl::StatusCode::kInternal,
               ::testing::StartsWith("train step: forward of micro-batch 1 of 2: libtorch: ")));
}

TEST(TrainStepTest, ALibtorchErrorInTheModelIsAStatusNamingTheStep) {
  OneRankStep s;
  const at::Tensor images = at::randn({4, 1, 8, 8});  // the model takes 3 channels
  const at::Tensor labels = at::zeros({4}, at::kLong);
  s.step->Begin(1);
  EXPECT_THAT(
      s.step->MicroBatch(images, labels),
      StatusIs(absl::StatusCode::kInternal,
               ::testing::StartsWith("train step: forward of micro-batch 1 of 1: libtorch: ")));
}

}  // namespace
}  // namespace stoker::trainer
