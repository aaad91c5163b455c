// Tests of BatchProducer: batches follow the sampler in (epoch, step) order with the
// dataset's labels and bytes, epochs queue back to back, the bytes do not depend on the
// thread count, bad requests and failing samples are reported, and the ring is unlinked.
#include "data_service/batch_producer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "data_service/ring.h"
#include "data_service/sampler.h"
#include "data_service/synthetic_dataset.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

std::string SegmentName() {
  static int counter = 0;
  return absl::StrCat("/stoker.producertest.", test_util::UniqueId(), ".ring.", counter++);
}

bool SegmentExists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

std::shared_ptr<const Dataset> Synthetic(int64_t samples = 53) {
  return std::shared_ptr<const Dataset>(std::move(*SyntheticDataset::Create({samples, 7, 5})));
}

RingRequest Request(int rank = 0, int world = 1) {
  RingRequest request;
  request.rank = rank;
  request.world_size = world;
  request.batch_size = 4;
  request.image_size = 8;
  request.slot_count = 3;
  return request;
}

struct Received {
  int64_t epoch, step;
  std::vector<int64_t> indices;
  std::vector<int32_t> labels;
  std::vector<uint8_t> images;
};

// Reads `batches` batches from the ring of `producer`.
std::vector<Received> Drain(const BatchProducer& producer, int64_t batches) {
  std::vector<Received> received;
  auto segment = SharedMemorySegment::Open(producer.segment_name());
  EXPECT_TRUE(segment.ok()) << segment.status();
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  EXPECT_TRUE(consumer.ok()) << consumer.status();
  const size_t image_bytes = producer.layout().batch_image_bytes / producer.layout().geometry.batch_size;
  for (int64_t b = 0; b < batches; ++b) {
    auto slot = consumer->Acquire(absl::Seconds(20));
    EXPECT_TRUE(slot.ok()) << slot.status();
    if (!slot.ok()) break;
    Received r{slot->epoch, slot->step,
               std::vector<int64_t>(slot->sample_indices, slot->sample_indices + slot->count),
               std::vector<int32_t>(slot->labels, slot->labels + slot->count),
               std::vector<uint8_t>(slot->images, slot->images + image_bytes * slot->count)};
    received.push_back(std::move(r));
    EXPECT_TRUE(consumer->Release(slot->slot).ok());
  }
  EXPECT_EQ(consumer->Acquire(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  return received;
}

std::unique_ptr<BatchProducer> Make(std::shared_ptr<const Dataset> dataset, WorkerPool* pool,
                                    const RingRequest& request, std::string name = SegmentName(),
                                    BatchProducer::ErrorCallback on_error = nullptr) {
  if (!on_error) {
    on_error = [](const absl::Status& s) { ADD_FAILURE() << "unexpected error: " << s; };
  }
  BatchProducerOptions options{name, request, 2};
  auto producer = BatchProducer::Create(options, std::move(dataset), pool, std::move(on_error));
  EXPECT_TRUE(producer.ok()) << producer.status();
  return producer.ok() ? std::move(*producer) : nullptr;
}

TEST(BatchProducerTest, DeliversTheSamplersIndicesWithTheDatasetsLabelsAndBytes) {
  WorkerPool pool(3);
  auto dataset = Synthetic();
  const RingRequest request = Request(1, 2);
  auto producer = Make(dataset, &pool, request);
  ASSERT_NE(producer, nullptr);
  auto info = producer->QueueEpoch(0, 77);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->samples, 27);  // ceil(53 / 2)
  EXPECT_EQ(info->batches, 7);   // ceil(27 / 4)
  std::vector<Received> batches = Drain(*producer, info->batches);
  auto sampler = DistributedSampler::Create({53, 2, 1, true, false});
  const std::vector<int64_t> expected = sampler->EpochIndices(77, 0);
  std::vector<int64_t> got;
  for (size_t b = 0; b < batches.size(); ++b) {
    EXPECT_EQ(batches[b].epoch, 0);
    EXPECT_EQ(batches[b].step, static_cast<int64_t>(b));
    EXPECT_EQ(batches[b].indices.size(), b + 1 < batches.size() ? 4u : 3u);
    for (size_t i = 0; i < batches[b].indices.size(); ++i) {
      const int64_t index = batches[b].indices[i];
      got.push_back(index);
      EXPECT_EQ(batches[b].labels[i], dataset->Label(index));
      std::vector<uint8_t> image(8 * 8 * 3);
      ASSERT_TRUE(dataset->Load(index, {8, true, 77, 0}, image.data()).ok());
      EXPECT_TRUE(std::equal(image.begin(), image.end(), batches[b].images.begin() + i * image.size()))
          << "sample " << index;
    }
  }
  EXPECT_EQ(got, expected);
}

TEST(BatchProducerTest, QueuedEpochsFollowEachOtherInTheRing) {
  WorkerPool pool(2);
  auto producer = Make(Synthetic(20), &pool, Request());
  ASSERT_NE(producer, nullptr);
  auto e3 = producer->QueueEpoch(3, 1);
  auto e5 = producer->QueueEpoch(5, 1);
  ASSERT_TRUE(e3.ok() && e5.ok());
  std::vector<Received> batches = Drain(*producer, e3->batches + e5->batches);
  ASSERT_EQ(batches.size(), 10u);
  for (size_t b = 0; b < batches.size(); ++b) {
    EXPECT_EQ(batches[b].epoch, b < 5 ? 3 : 5);
    EXPECT_EQ(batches[b].step, static_cast<int64_t>(b % 5));
  }
  EXPECT_NE(batches[0].indices, batches[5].indices);
}

TEST(BatchProducerTest, BatchesAreBitIdenticalWhateverTheThreadCount) {
  std::vector<std::vector<Received>> runs;
  for (int threads : {1, 4}) {
    WorkerPool pool(threads);
    RingRequest request = Request();
    request.batch_size = 16;
    request.image_size = 20;
    auto producer = Make(Synthetic(100), &pool, request);
    ASSERT_NE(producer, nullptr);
    auto a = producer->QueueEpoch(0, 9);
    auto b = producer->QueueEpoch(1, 9);
    ASSERT_TRUE(a.ok() && b.ok());
    runs.push_back(Drain(*producer, a->batches + b->batches));
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t b = 0; b < runs[0].size(); ++b) {
    EXPECT_EQ(runs[0][b].indices, runs[1][b].indices);
    EXPECT_EQ(runs[0][b].labels, runs[1][b].labels);
    EXPECT_EQ(runs[0][b].images, runs[1][b].images) << "batch " << b;
  }
}

TEST(BatchProducerTest, ValidationRingsAreNotShuffled) {
  WorkerPool pool(1);
  RingRequest request = Request(0, 3);
  request.train = false;
  auto producer = Make(Synthetic(10), &pool, request);
  ASSERT_NE(producer, nullptr);
  auto info = producer->QueueEpoch(0, 1);
  ASSERT_TRUE(info.ok());
  std::vector<Received> batches = Drain(*producer, info->batches);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].indices, (std::vector<int64_t>{0, 3, 6, 9}));
}

TEST(BatchProducerTest, RejectsBadRequestsNamingTheField) {
  WorkerPool pool(1);
  auto dataset = Synthetic();
  auto on_error = [](const absl::Status&) {};
  struct Case {
    std::string field;
    RingRequest request;
  };
  std::vector<Case> cases;
  cases.push_back({"batch_size", Request()});
  cases.back().request.batch_size = 0;
  cases.push_back({"image_size", Request()});
  cases.back().request.image_size = -3;
  cases.push_back({"slot_count", Request()});
  cases.back().request.slot_count = 0;
  cases.push_back({"rank", Request(2, 2)});
  cases.push_back({"world_size", Request(0, 0)});
  for (const Case& c : cases) {
    const std::string name = SegmentName();
    auto producer = BatchProducer::Create({name, c.request, 2}, dataset, &pool, on_error);
    EXPECT_EQ(producer.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(producer.status().message().find(c.field), std::string::npos)
        << producer.status();
    EXPECT_FALSE(SegmentExists(name));
  }
  RingRequest huge = Request();
  huge.batch_size = kMaxBatchSize;
  huge.image_size = kMaxImageSize;
  const std::string name = SegmentName();
  auto producer = BatchProducer::Create({name, huge, 2}, dataset, &pool, on_error);
  EXPECT_EQ(producer.status().code(), absl::StatusCode::kResourceExhausted) << producer.status();
  EXPECT_NE(producer.status().message().find("/dev/shm"), std::string::npos);
  EXPECT_FALSE(SegmentExists(name));
}

TEST(BatchProducerTest, EpochsMustBeNonNegativeAndIncreasing) {
  WorkerPool pool(1);
  auto producer = Make(Synthetic(), &pool, Request());
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(producer->QueueEpoch(-1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(producer->QueueEpoch(2, 0).ok());
  EXPECT_EQ(producer->QueueEpoch(2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(producer->QueueEpoch(1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Fails on one index, otherwise delegates.
class FailingDataset : public Dataset {
 public:
  FailingDataset(std::shared_ptr<const Dataset> base, int64_t bad) : base_(base), bad_(bad) {}
  int64_t size() const override { return base_->size(); }
  int32_t num_classes() const override { return base_->num_classes(); }
  int32_t Label(int64_t index) const override { return base_->Label(index); }
  absl::Status Load(int64_t index, const SampleOptions& options, uint8_t* dst) const override {
    if (index == bad_) return absl::InvalidArgumentError("corrupt image");
    return base_->Load(index, options, dst);
  }
  std::string Describe(int64_t index) const override { return base_->Describe(index); }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t bad_;
};

TEST(BatchProducerTest, AFailingSampleStopsProductionAndIsReportedByName) {
  WorkerPool pool(2);
  absl::Mutex mu;
  std::vector<absl::Status> errors;
  auto dataset = std::make_shared<FailingDataset>(Synthetic(30), 17);
  auto producer = Make(dataset, &pool, Request(), SegmentName(), [&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    errors.push_back(s);
  });
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(producer->QueueEpoch(0, 3).ok());
  auto segment = SharedMemorySegment::Open(producer->segment_name());
  ASSERT_TRUE(segment.ok());
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  ASSERT_TRUE(consumer.ok());
  // Consume until production stops.
  while (true) {
    auto slot = consumer->Acquire(absl::Seconds(2));
    if (!slot.ok()) break;
    for (int i = 0; i < slot->count; ++i) EXPECT_NE(slot->sample_indices[i], 17);
    ASSERT_TRUE(consumer->Release(slot->slot).ok());
  }
  absl::MutexLock lock(&mu);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(errors[0].message().find("sample 17"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].message().find("corrupt image"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].message().find("rank 0, epoch 0"), std::string::npos) << errors[0];
  EXPECT_EQ(producer->QueueEpoch(1, 3).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BatchProducerTest, DestroyingAProducerBlockedOnAFullRingUnlinksTheRing) {
  WorkerPool pool(2);
  const std::string name = SegmentName();
  auto producer = Make(Synthetic(200), &pool, Request(), name);
  ASSERT_NE(producer, nullptr);
  ASSERT_TRUE(producer->QueueEpoch(0, 1).ok());  // 50 batches into 3 slots: it blocks
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(SegmentExists(name));
  const absl::Time start = absl::Now();
  producer.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(SegmentExists(name));
}

}  // namespace
}  // namespace stoker::data_service
