// TrainingModel over 2 MPI ranks: after steps on different shards each rank's running
// statistics are its own; SyncBuffers gives every rank rank 0's (Note [Running statistics
// as DDP keeps them]) and leaves the parameters alone, and --export writes those buffers.
// With --sync_batchnorm the ranks' running statistics agree without it. With channels_last,
// every 4-D weight has channels-last strides, 1x1 convolutions' included.
#include "trainer/training_model.h"

#include <ATen/ATen.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/comm/mpi_communicator.h"
#include "trainer/nn/state_dict_file.h"

namespace stoker::trainer {
namespace {

std::vector<at::Tensor> Copies(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> copies;
  for (const at::Tensor& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

// Rank 0's copies of `tensors`, on every rank (a separate broadcast of clones).
std::vector<at::Tensor> RankZeroCopies(const std::vector<at::Tensor>& tensors, Communicator& comm) {
  std::vector<at::Tensor> copies = Copies(tensors);
  for (at::Tensor& c : copies) EXPECT_TRUE(comm.Broadcast(c.data_ptr(), c.nbytes(), 0).ok());
  return copies;
}

struct TrainedModel {
  RunContext context;
  TrainerOptions options;
  std::unique_ptr<TrainingModel> model;
};

// small_cnn (batch norm after each convolution) trained for three steps on this rank's own
// shard: each rank's images come from a different distribution.
void Train(Communicator& comm, bool sync_batchnorm, TrainedModel* t) {
  t->context.rank.rank = comm.rank();
  t->context.rank.world_size = comm.world_size();
  t->options.model.name = "small_cnn";
  t->options.model.sync_batchnorm = sync_batchnorm;
  t->options.input.image_size = 16;
  t->options.device.channels_last = false;
  auto created = TrainingModel::Create(t->options, t->context, comm);
  ASSERT_TRUE(created.ok()) << created.status();
  t->model = std::move(*created);
  ASSERT_TRUE(t->model->BroadcastState(comm).ok());
  t->model->model().train();
  at::manual_seed(100 + comm.rank());
  for (int step = 0; step < 3; ++step) {
    t->model->step().Begin(1);
    const at::Tensor images = at::randn({4, 3, 16, 16}) * (1 + comm.rank()) + comm.rank();
    const at::Tensor labels = at::randint(0, 10, {4}, at::kLong);
    ASSERT_TRUE(t->model->step().MicroBatch(images, labels).ok());
    ASSERT_TRUE(t->model->step().Finish(0.1).ok());
  }
}

TEST(TrainingModelTest, SyncBuffersGivesEveryRankRankZerosRunningStatistics) {
  auto mpi = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  Communicator& comm = **mpi;
  ASSERT_GE(comm.world_size(), 2);
  TrainedModel t;
  Train(comm, /*sync_batchnorm=*/false, &t);
  if (HasFatalFailure()) return;
  ImageClassifier& model = t.model->model();

  const std::vector<at::Tensor> mine = Copies(model.buffers());
  const std::vector<at::Tensor> rank0 = RankZeroCopies(model.buffers(), comm);
  const std::vector<at::Tensor> parameters = Copies(model.parameters());
  ASSERT_EQ(mine.size(), 9u);  // 3 batch norms: mean, var, num_batches_tracked; none else
  bool differ = false;
  for (size_t i = 0; i < mine.size(); ++i) differ = differ || !at::equal(mine[i], rank0[i]);
  if (comm.rank() != 0) {
    EXPECT_TRUE(differ) << "the shards gave the ranks the same statistics";
  }

  ASSERT_TRUE(t.model->SyncBuffers(comm).ok());
  const std::vector<at::Tensor> buffers = model.buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_TRUE(at::equal(buffers[i], rank0[i])) << "buffer " << i << " on rank " << comm.rank();
  }
  EXPECT_EQ(buffers.back().scalar_type(), at::kLong);
  const std::vector<at::Tensor> after = model.parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(at::equal(after[i], parameters[i])) << "parameter " << i << " changed";
  }

  // What --export writes is what validation now reads.
  if (comm.rank() == 0) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/exported_" +
                             std::to_string(getpid()) + ".pth";
    ASSERT_TRUE(t.model->ExportWeights(path, 0644).ok());
    StateDictFileOptions own_export;  // torch.save's format, which this run wrote
    own_export.allow_pickle = true;
    auto exported = ReadStateDictFile(path, own_export);
    ASSERT_TRUE(exported.ok()) << exported.status();
    int compared = 0;
    for (const auto& item : model.named_buffers()) {
      auto found = exported->find(item.key());
      ASSERT_NE(found, exported->end()) << item.key();
      EXPECT_TRUE(at::equal(found->second, item.value())) << item.key();
      ++compared;
    }
    EXPECT_EQ(compared, 9);
  }
}

// Note [Channels-last weights]: ResNet-18's 1x1 downsample convolutions' weights too.
TEST(TrainingModelTest, ChannelsLastGivesEveryConvolutionWeightChannelsLastStrides) {
  auto mpi = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  TrainedModel t;
  t.options.model.name = "resnet18";
  t.options.input.image_size = 32;
  t.options.device.channels_last = true;
  auto created = TrainingModel::Create(t.options, t.context, **mpi);
  ASSERT_TRUE(created.ok()) << created.status();
  int one_by_one = 0;
  for (const auto& item : (*created)->model().named_parameters()) {
    const at::Tensor& p = item.value();
    if (p.dim() != 4) continue;
    EXPECT_EQ(p.suggest_memory_format(), at::MemoryFormat::ChannelsLast) << item.key();
    if (p.size(2) == 1 && p.size(3) == 1) ++one_by_one;
  }
  EXPECT_EQ(one_by_one, 3);  // layer2-4's downsample convolutions
}

TEST(TrainingModelTest, SyncBatchNormKeepsTheRanksRunningStatisticsEqual) {
  auto mpi = MpiCommunicator::Create(MPI_COMM_WORLD);
  ASSERT_TRUE(mpi.ok()) << mpi.status();
  Communicator& comm = **mpi;
  TrainedModel t;
  Train(comm, /*sync_batchnorm=*/true, &t);
  if (HasFatalFailure()) return;
  const std::vector<at::Tensor> buffers = t.model->model().buffers();
  const std::vector<at::Tensor> rank0 = RankZeroCopies(buffers, comm);
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_TRUE(at::allclose(buffers[i], rank0[i], 1e-5, 1e-6)) << "buffer " << i;
  }
}

}  // namespace
}  // namespace stoker::trainer
