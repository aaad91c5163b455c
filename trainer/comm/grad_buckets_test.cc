// Bucketed gradient averaging over MPI equals the gradient of one process over the union
// of all ranks' batches. Runs as 2 MPI ranks (mpi_cc_test).
#include "trainer/comm/grad_buckets.h"

#include <ATen/ATen.h>
#include <mpi.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "trainer/comm/mpi_communicator.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::HasSubstr;

// A model without batch statistics, so that the union's gradient is exactly the mean of
// the halves' gradients.
struct Net : torch::nn::Module {
  Net() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(4 * 6 * 6, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 5));
  }
  at::Tensor forward(at::Tensor x) {
    return fc2->forward(fc1->forward(conv->forward(x).relu().flatten(1)).tanh());
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Sets the parameters of `to` to those of `from`.
void CopyParameters(Net& from, Net& to) {
  torch::NoGradGuard no_grad;
  auto a = from.parameters(), b = to.parameters();
  for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
}

std::pair<std::vector<at::Tensor>, std::vector<std::string>> Parameters(Net& net) {
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : net.named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  return {params, names};
}

TEST(GradBucketsTest, BucketedMpiAverageEqualsUnionGradient) {
  auto comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_OK(comm);
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  ASSERT_GE(world, 2);

  torch::manual_seed(7);
  Net net;
  Net reference;
  CopyParameters(net, reference);
  const int per_rank = 6;
  at::Tensor images = at::randn({per_rank * world, 3, 8, 8});
  at::Tensor labels = at::randint(0, 5, {per_rank * world}, at::kLong);

  auto [params, names] = Parameters(net);
  // A small budget, so the model spans several buckets.
  auto buckets = GradBuckets::Create(params, names, /*bucket_bytes=*/2048, comm->get());
  ASSERT_OK(buckets);
  ASSERT_GT((*buckets)->plan().size(), 2u);
  (*buckets)->ZeroGrad();
  (*buckets)->BeginStep(/*reduce=*/true);
  at::Tensor mine = images.narrow(0, rank * per_rank, per_rank);
  torch::nn::functional::cross_entropy(net.forward(mine),
                                       labels.narrow(0, rank * per_rank, per_rank))
      .backward();
  EXPECT_EQ((*buckets)->buckets_launched(), static_cast<int>((*buckets)->plan().size()));
  ASSERT_OK((*buckets)->FinishStep());

  torch::nn::functional::cross_entropy(reference.forward(images), labels).backward();
  auto ref = reference.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::allclose(params[i].grad(), ref[i].grad(), 1e-5, 1e-6)) << names[i];
    EXPECT_EQ(params[i].grad().data_ptr(), params[i].grad().data_ptr());
  }
}

TEST(GradBucketsTest, ParameterWithoutGradientIsNamed) {
  auto comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_OK(comm);
  torch::manual_seed(1);
  Net net;
  auto [params, names] = Parameters(net);
  auto buckets = GradBuckets::Create(params, names, 1 << 20, comm->get());
  ASSERT_OK(buckets);
  (*buckets)->BeginStep(/*reduce=*/true);
  // fc2 is left out of the loss: its gradients never arrive.
  net.fc1->forward(net.conv->forward(at::randn({2, 3, 8, 8})).relu().flatten(1)).sum().backward();
  absl::Status status = (*buckets)->FinishStep();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("fc2.weight")));
}

TEST(GradBucketsTest, AccumulationStepDoesNotCommunicate) {
  auto comm = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_OK(comm);
  torch::manual_seed(3);
  Net net;
  auto [params, names] = Parameters(net);
  auto buckets = GradBuckets::Create(params, names, 2048, comm->get());
  ASSERT_OK(buckets);
  (*buckets)->ZeroGrad();
  (*buckets)->BeginStep(/*reduce=*/false);
  net.forward(at::full({1, 3, 8, 8}, (*comm)->rank() + 1.0)).sum().backward();
  EXPECT_EQ((*buckets)->buckets_launched(), 0);
  EXPECT_OK((*buckets)->FinishStep());
}

TEST(GradBucketsTest, OneRankKeepsAutogradGradientsAndAccumulates) {
  auto comm = MpiCommunicator::Create(MPI_COMM_SELF);
  ASSERT_OK(comm);
  ASSERT_EQ((*comm)->world_size(), 1);
  torch::manual_seed(5);
  Net net;
  Net reference;
  CopyParameters(net, reference);
  auto [params, names] = Parameters(net);
  auto buckets = GradBuckets::Create(params, names, 2048, comm->get());
  ASSERT_OK(buckets);
  at::Tensor x1 = at::randn({3, 3, 8, 8}), x2 = at::randn({3, 3, 8, 8});
  for (int step = 0; step < 2; ++step) {
    (*buckets)->ZeroGrad();
    for (const at::Tensor& p : params) EXPECT_FALSE(p.grad().defined());
    // Two micro-batches: the second adds to the first's gradients.
    for (const at::Tensor& x : {x1, x2}) {
      (*buckets)->BeginStep(/*reduce=*/true);
      net.forward(x).sum().backward();
      ASSERT_OK((*buckets)->FinishStep());
    }
  }
  (reference.forward(x1).sum() + reference.forward(x2).sum()).backward();
  auto ref = reference.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::allclose(params[i].grad(), ref[i].grad(), 1e-5, 1e-6)) << names[i];
  }
}

// For a CUDA graph: one rank with fixed addresses keeps every gradient in its bucket, at the
// same address from step to step, zeroed in place, and communicates nothing.
TEST(GradBucketsTest, OneRankWithFixedAddressesAccumulatesInPlaceInItsBuckets) {
  auto comm = MpiCommunicator::Create(MPI_COMM_SELF);
  ASSERT_OK(comm);
  torch::manual_seed(5);
  Net net;
  Net reference;
  CopyParameters(net, reference);
  auto [params, names] = Parameters(net);
  auto buckets = GradBuckets::Create(params, names, 2048, comm->get(), /*fixed_addresses=*/true);
  ASSERT_OK(buckets);
  std::vector<const void*> addresses;
  for (const at::Tensor& p : params) addresses.push_back(p.grad().data_ptr());
  at::Tensor x1 = at::randn({3, 3, 8, 8}), x2 = at::randn({3, 3, 8, 8});
  for (int step = 0; step < 2; ++step) {
    (*buckets)->ZeroGrad();
    for (const at::Tensor& p : params) EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
    for (const at::Tensor& x : {x1, x2}) {
      (*buckets)->BeginStep(/*reduce=*/true);
      net.forward(x).sum().backward();
      ASSERT_OK((*buckets)->FinishStep());
    }
  }
  EXPECT_EQ((*comm)->ledger() == nullptr ? 0u : (*comm)->ledger()->Read().issued, 0u);
  (reference.forward(x1).sum() + reference.forward(x2).sum()).backward();
  auto ref = reference.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().data_ptr(), addresses[i]) << names[i];
    EXPECT_TRUE(at::allclose(params[i].grad(), ref[i].grad(), 1e-5, 1e-6)) << names[i];
  }
  EXPECT_OK((*buckets)->WatchReplay());
}

}  // namespace
}  // namespace stoker::trainer
