// Tests of the shared-memory batch ring: order, wrap-around, blocking with timeouts, and
// a stress run with the consumer in another thread and in another process.
#include "data_service/ring/ring.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shm_segment.h"
#include "common/testing/status_matchers.h"
#include "common/testing/unique_name.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::stoker::testing::UniqueName;

// Content of sample `i` of the batch at `position`: every byte depends on both.
uint8_t Pixel(uint64_t position, int sample, size_t byte) {
  return static_cast<uint8_t>(position * 131 + sample * 31 + byte * 7 + (byte >> 8));
}

void Fill(const RingLayout& layout, const WritableSlot& slot, int count) {
  const size_t per_image = layout.batch_image_bytes / layout.geometry.batch_size;
  for (int i = 0; i < count; ++i) {
    slot.labels[i] = static_cast<int32_t>(slot.position % 1000 + i);
    slot.sample_indices[i] = static_cast<int64_t>(slot.position * 1000 + i);
    for (size_t b = 0; b < per_image; ++b) {
      slot.images[i * per_image + b] = Pixel(slot.position, i, b);
    }
  }
}

// Returns an empty string if the batch is intact, else what is wrong.
std::string Check(const RingLayout& layout, const ReadableSlot& slot, uint64_t position,
                  int count) {
  if (slot.position != position) return absl::StrCat("position ", slot.position, " != ", position);
  if (slot.count != count) return absl::StrCat("count ", slot.count, " != ", count);
  if (slot.epoch != static_cast<int64_t>(position / 10) ||
      slot.step != static_cast<int64_t>(position % 10)) {
    return absl::StrCat("epoch/step ", slot.epoch, "/", slot.step, " at position ", position);
  }
  const size_t per_image = layout.batch_image_bytes / layout.geometry.batch_size;
  for (int i = 0; i < count; ++i) {
    if (slot.labels[i] != static_cast<int32_t>(position % 1000 + i)) return "label";
    if (slot.sample_indices[i] != static_cast<int64_t>(position * 1000 + i)) return "index";
    for (size_t b = 0; b < per_image; ++b) {
      if (slot.images[i * per_image + b] != Pixel(position, i, b)) {
        return absl::StrCat("image byte ", b, " of sample ", i, " at position ", position);
      }
    }
  }
  return "";
}

int CountFor(uint64_t position, int batch) { return 1 + static_cast<int>(position % batch); }

// Fills `slot` with `count` samples and publishes it under the epoch and step that Check
// expects of its position.
absl::Status FillAndPublish(RingProducer& producer, const WritableSlot& slot, int count) {
  Fill(producer.layout(), slot, count);
  return producer.Publish(slot, slot.position / 10, slot.position % 10, count);
}

// Claims the next slot without waiting, then fills and publishes it with `count` samples.
absl::StatusOr<WritableSlot> PublishNext(RingProducer& producer, int count) {
  auto slot = producer.Claim(absl::ZeroDuration());
  if (!slot.ok()) return slot.status();
  if (absl::Status published = FillAndPublish(producer, *slot, count); !published.ok()) {
    return published;
  }
  return slot;
}

// Acquires the next batch without waiting; an error unless it is the intact batch at
// `position` with `count` samples.
absl::StatusOr<ReadableSlot> AcquireIntact(RingConsumer& consumer, uint64_t position, int count) {
  auto slot = consumer.Acquire(absl::ZeroDuration());
  if (!slot.ok()) return slot.status();
  if (std::string problem = Check(consumer.layout(), *slot, position, count); !problem.empty()) {
    return absl::DataLossError(problem);
  }
  return slot;
}

class RingTest : public ::testing::Test {
 protected:
  void MakeRing(RingGeometry geometry) {
    geometry_ = geometry;
    auto layout = RingLayout::For(geometry);
    ASSERT_OK(layout);
    auto segment =
        SharedMemorySegment::Create(UniqueName("/stoker.ringtest.ring"), layout->total_bytes);
    ASSERT_OK(segment);
    segment_ = std::move(*segment);
  }
  RingProducer Producer() {
    auto producer = RingProducer::Initialize(segment_.data(), segment_.size(), geometry_);
    EXPECT_OK(producer);
    return std::move(*producer);
  }
  RingConsumer Consumer() {
    auto consumer = RingConsumer::Attach(segment_.data(), segment_.size());
    EXPECT_OK(consumer);
    return std::move(*consumer);
  }

  RingGeometry geometry_;
  SharedMemorySegment segment_;
};

TEST(RingLayoutTest, SlotsArePageAlignedAndFitTheTotal) {
  auto layout = RingLayout::For({3, 5, 7});
  ASSERT_OK(layout);
  EXPECT_EQ(layout->image_offset % kRingPageBytes, 0u);
  EXPECT_EQ(layout->image_stride % kRingPageBytes, 0u);
  EXPECT_EQ(layout->slot_meta_stride % 64, 0u);
  EXPECT_EQ(layout->batch_image_bytes, 5u * 7 * 7 * 3);
  EXPECT_GE(layout->image_stride, layout->batch_image_bytes);
  EXPECT_GE(layout->image_offset, layout->slot_meta_offset + 3 * layout->slot_meta_stride);
  EXPECT_EQ(layout->total_bytes, layout->image_offset + 3 * layout->image_stride);
  EXPECT_GE(layout->slot_meta_stride, sizeof(RingSlotMeta) + 5 * (8 + 4 + 1));
  EXPECT_EQ(layout->kinds_offset, layout->labels_offset + 5 * 4);
  EXPECT_LE(layout->kinds_offset + 5, layout->slot_meta_stride);
}

TEST(RingLayoutTest, RejectsGeometryOutOfRange) {
  EXPECT_THAT(RingLayout::For({0, 1, 1}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RingLayout::For({1, 0, 1}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RingLayout::For({1, 1, 0}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RingLayout::For({1, 1, -5}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RingLayout::For({kMaxSlotCount + 1, 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RingLayout::For({1, kMaxBatchSize + 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(RingLayout::For({1, 1, kMaxImageSize + 1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RingTest, OneProducerAndOneConsumerPassBatchesInOrder) {
  MakeRing({4, 3, 5});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  for (uint64_t p = 0; p < 3; ++p) {
    auto slot = PublishNext(producer, CountFor(p, 3));
    ASSERT_OK(slot);
  }
  for (uint64_t p = 0; p < 3; ++p) {
    auto slot = AcquireIntact(consumer, p, CountFor(p, 3));
    ASSERT_OK(slot);
    EXPECT_EQ(slot->slot, static_cast<int32_t>(p));
    EXPECT_OK(consumer.Release(slot->slot));
  }
}

// Sample kinds: a claimed slot starts all pixels (whatever its last use left), Publish
// counts the deferred samples, and the consumer sees both.
TEST_F(RingTest, SampleKindsStartAsPixelsAndDeferredSamplesAreCounted) {
  MakeRing({1, 4, 4});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  for (uint64_t p = 0; p < 2; ++p) {
    auto w = producer.Claim(absl::Seconds(1));
    ASSERT_OK(w);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(w->sample_kinds[i], static_cast<uint8_t>(SampleKind::kPixels)) << p;
    }
    Fill(producer.layout(), *w, 4);
    if (p == 0) {
      w->sample_kinds[1] = static_cast<uint8_t>(SampleKind::kDeferredJpeg);
      w->sample_kinds[3] = static_cast<uint8_t>(SampleKind::kDeferredJpeg);
    }
    ASSERT_OK(producer.Publish(*w, p / 10, p % 10, 4));
    auto r = consumer.Acquire(absl::Seconds(1));
    ASSERT_OK(r);
    EXPECT_EQ(r->deferred_count, p == 0 ? 2 : 0);
    EXPECT_EQ(r->sample_kinds[1],
              static_cast<uint8_t>(p == 0 ? SampleKind::kDeferredJpeg : SampleKind::kPixels));
    ASSERT_OK(consumer.Release(r->slot));
  }
}

// Note [The requested GPU decode share]: the consumer's word in the header reaches the
// producer, starting at 0; each slot carries the share it was published with.
TEST_F(RingTest, RequestedShareReachesTheProducerAndSlotsCarryTheirShare) {
  MakeRing({2, 4, 4});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  EXPECT_EQ(producer.RequestedGpuDecodeShare(), 0.0);
  for (double share : {0.25, 1.0, 0.125, 0.0, 0.3}) {
    consumer.RequestGpuDecodeShare(share);
    EXPECT_EQ(producer.RequestedGpuDecodeShare(), share);
    auto w = producer.Claim(absl::Seconds(1));
    ASSERT_OK(w);
    Fill(producer.layout(), *w, 4);
    ASSERT_OK(producer.Publish(*w, 0, 0, 4, producer.RequestedGpuDecodeShare()));
    auto r = consumer.Acquire(absl::Seconds(1));
    ASSERT_OK(r);
    EXPECT_EQ(r->gpu_decode_share, share);
    ASSERT_OK(consumer.Release(r->slot));
  }
  consumer.RequestGpuDecodeShare(7.5);
  EXPECT_EQ(producer.RequestedGpuDecodeShare(), 1.0);
  consumer.RequestGpuDecodeShare(-1);
  EXPECT_EQ(producer.RequestedGpuDecodeShare(), 0.0);
  // Memory another process wrote: out-of-range words read as 1.
  static_cast<RingHeader*>(segment_.data())->requested_gpu_decode_share = ~uint32_t{0};
  EXPECT_EQ(producer.RequestedGpuDecodeShare(), 1.0);
}

TEST_F(RingTest, PublishRefusesAnUnknownSampleKind) {
  MakeRing({1, 2, 4});
  RingProducer producer = Producer();
  auto w = producer.Claim(absl::Seconds(1));
  ASSERT_OK(w);
  w->sample_kinds[1] = 7;
  EXPECT_THAT(producer.Publish(*w, 0, 0, 2), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RingTest, WrapsAroundManyTimes) {
  MakeRing({3, 2, 4});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  for (uint64_t p = 0; p < 100; ++p) {
    auto w = PublishNext(producer, CountFor(p, 2));
    ASSERT_OK(w);
    EXPECT_EQ(w->slot, static_cast<int32_t>(p % 3));
    auto r = AcquireIntact(consumer, p, CountFor(p, 2));
    ASSERT_OK(r);
    ASSERT_OK(consumer.Release(r->slot));
  }
}

TEST_F(RingTest, SingleSlotRingAlternates) {
  MakeRing({1, 1, 2});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  for (uint64_t p = 0; p < 10; ++p) {
    auto w = PublishNext(producer, 1);
    ASSERT_OK(w);
    EXPECT_THAT(producer.Claim(absl::ZeroDuration()),
                StatusIs(absl::StatusCode::kDeadlineExceeded));
    auto r = AcquireIntact(consumer, p, 1);
    ASSERT_OK(r);
    EXPECT_THAT(consumer.Acquire(absl::ZeroDuration()),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    ASSERT_OK(consumer.Release(r->slot));
  }
}

TEST_F(RingTest, FullRingBlocksProducerUntilTimeout) {
  MakeRing({2, 1, 2});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  for (uint64_t p = 0; p < 2; ++p) {
    ASSERT_OK(PublishNext(producer, 1));
  }
  const absl::Time start = absl::Now();
  auto blocked = producer.Claim(absl::Milliseconds(200));
  EXPECT_THAT(blocked, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  // Acquiring is not enough: the slot is free only once released.
  auto r = consumer.Acquire(absl::ZeroDuration());
  ASSERT_OK(r);
  EXPECT_THAT(producer.Claim(absl::ZeroDuration()), StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK(consumer.Release(r->slot));
  auto w = producer.Claim(absl::ZeroDuration());
  ASSERT_OK(w);
  EXPECT_EQ(w->position, 2u);
}

TEST_F(RingTest, ReleaseWakesABlockedProducer) {
  MakeRing({1, 1, 2});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  ASSERT_OK(PublishNext(producer, 1));
  auto r = consumer.Acquire(absl::ZeroDuration());
  ASSERT_OK(r);
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_OK(consumer.Release(r->slot));
  });
  const absl::Time start = absl::Now();
  auto next = producer.Claim(absl::Seconds(10));
  EXPECT_OK(next);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  releaser.join();
}

TEST_F(RingTest, EmptyRingBlocksConsumerUntilDeadlineExceeded) {
  MakeRing({2, 1, 2});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  const absl::Time start = absl::Now();
  auto r = consumer.Acquire(absl::Milliseconds(200));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  // A claimed but unpublished slot is still invisible.
  auto w = producer.Claim(absl::ZeroDuration());
  ASSERT_OK(w);
  EXPECT_THAT(consumer.Acquire(absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK(FillAndPublish(producer, *w, 1));
  EXPECT_OK(consumer.Acquire(absl::ZeroDuration()));
}

TEST_F(RingTest, SlotsMayBeReleasedOutOfOrder) {
  MakeRing({3, 1, 2});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  for (uint64_t p = 0; p < 3; ++p) {
    ASSERT_OK(PublishNext(producer, 1));
  }
  auto a = consumer.Acquire(absl::ZeroDuration());
  auto b = consumer.Acquire(absl::ZeroDuration());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_OK(consumer.Release(b->slot));
  // Position 3 reuses slot 0, which is still held: the producer must wait for it.
  EXPECT_THAT(producer.Claim(absl::ZeroDuration()), StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK(consumer.Release(a->slot));
  auto w = producer.Claim(absl::ZeroDuration());
  ASSERT_OK(w);
  EXPECT_EQ(w->slot, 0);
}

TEST_F(RingTest, DoubleReleaseIsAnError) {
  MakeRing({2, 1, 2});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  ASSERT_OK(PublishNext(producer, 1));
  auto r = consumer.Acquire(absl::ZeroDuration());
  ASSERT_OK(r);
  ASSERT_OK(consumer.Release(r->slot));
  EXPECT_THAT(consumer.Release(r->slot), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(consumer.Release(1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(consumer.Release(-1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(consumer.Release(7), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(RingTest, ProducerRejectsOutOfOrderPublishAndBadCount) {
  MakeRing({3, 2, 2});
  RingProducer producer = Producer();
  auto a = producer.Claim(absl::ZeroDuration());
  auto b = producer.Claim(absl::ZeroDuration());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(producer.claimed(), 2);
  EXPECT_THAT(producer.Publish(*b, 0, 1, 1), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(producer.Publish(*a, 0, 0, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(producer.Publish(*a, 0, 0, 3), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(producer.Publish(*a, 0, 0, 2));
  EXPECT_OK(producer.Publish(*b, 0, 1, 2));
  EXPECT_THAT(producer.Publish(*b, 0, 1, 2), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(RingTest, ConsumerRejectsAnythingButARing) {
  MakeRing({2, 2, 2});
  std::memset(segment_.data(), 0xab, 4096);
  EXPECT_THAT(RingConsumer::Attach(segment_.data(), segment_.size()),
              StatusIs(absl::StatusCode::kDataLoss));
  ASSERT_OK(RingProducer::Initialize(segment_.data(), segment_.size(), geometry_));
  EXPECT_THAT(RingConsumer::Attach(segment_.data(), 64), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(RingConsumer::Attach(segment_.data(), segment_.size() - 1),
              StatusIs(absl::StatusCode::kDataLoss));
  RingHeader* header = static_cast<RingHeader*>(segment_.data());
  header->version = kRingVersion + 1;
  EXPECT_THAT(RingConsumer::Attach(segment_.data(), segment_.size()),
              StatusIs(absl::StatusCode::kDataLoss));
  header->version = kRingVersion;
  header->image_stride += 1;
  EXPECT_THAT(RingConsumer::Attach(segment_.data(), segment_.size()),
              StatusIs(absl::StatusCode::kDataLoss));
}

constexpr uint64_t kStressBatches = 3000;

// Consumes kStressBatches batches and returns "" if every one arrived once, in order,
// intact.
std::string ConsumeAll(RingConsumer& consumer) {
  const int batch = consumer.layout().geometry.batch_size;
  for (uint64_t p = 0; p < kStressBatches; ++p) {
    auto r = consumer.Acquire(absl::Seconds(20));
    if (!r.ok()) return absl::StrCat("position ", p, ": ", r.status().ToString());
    std::string problem = Check(consumer.layout(), *r, p, CountFor(p, batch));
    if (!problem.empty()) return problem;
    if (absl::Status s = consumer.Release(r->slot); !s.ok()) return s.ToString();
  }
  if (consumer.Acquire(absl::Milliseconds(50)).ok()) return "an extra batch arrived";
  return "";
}

// Produces kStressBatches batches, keeping up to two claimed at once.
void ProduceAll(RingProducer& producer) {
  const int batch = producer.layout().geometry.batch_size;
  std::vector<WritableSlot> claimed;
  uint64_t next = 0;
  while (next < kStressBatches || !claimed.empty()) {
    if (next < kStressBatches && claimed.size() < 2) {
      auto w = producer.Claim(absl::Seconds(20));
      ASSERT_OK(w);
      Fill(producer.layout(), *w, CountFor(next, batch));
      claimed.push_back(*w);
      ++next;
      if (next % 3 != 0) continue;  // vary how many are in flight
    }
    const WritableSlot w = claimed.front();
    claimed.erase(claimed.begin());
    ASSERT_OK(producer.Publish(w, w.position / 10, w.position % 10, CountFor(w.position, batch)));
  }
}

TEST_F(RingTest, StressWithConsumerThreadDeliversEveryBatchOnceInOrder) {
  MakeRing({3, 4, 6});
  RingProducer producer = Producer();
  RingConsumer consumer = Consumer();
  std::string problem = "not run";
  std::thread consumer_thread([&] { problem = ConsumeAll(consumer); });
  ProduceAll(producer);
  consumer_thread.join();
  EXPECT_EQ(problem, "");
}

TEST_F(RingTest, StressWithConsumerProcessDeliversEveryBatchOnceInOrder) {
  MakeRing({4, 3, 8});
  RingProducer producer = Producer();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The consumer maps the ring by name, as a trainer does.
    auto segment = SharedMemorySegment::Open(segment_.name());
    if (!segment.ok()) _exit(3);
    auto consumer = RingConsumer::Attach(segment->data(), segment->size());
    if (!consumer.ok()) _exit(4);
    std::string problem = ConsumeAll(*consumer);
    if (!problem.empty()) {
      fprintf(stderr, "consumer process: %s\n", problem.c_str());
      _exit(1);
    }
    _exit(0);
  }
  ProduceAll(producer);
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  pid_t done = 0;
  while ((done = waitpid(child, &status, WNOHANG)) == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (done == 0) kill(child, SIGKILL), waitpid(child, &status, 0);
  ASSERT_EQ(done, child) << "consumer process did not finish";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace stoker::data_service
