// Tests of what the client keeps of a slot (Note [Slot contents are checked] in
// ring_client.cc): a private copy, read once from the ring and checked there.
#include "data_service/ring/ring_client.h"

#include <cstring>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace stoker::data_service::internal {
namespace {

using ::stoker::testing::StatusIs;

constexpr int kImageSize = 64;
constexpr size_t kSampleBytes = size_t{kImageSize} * kImageSize * 3;

RingRequest Request() {
  RingRequest request;
  request.batch_size = 4;
  request.image_size = kImageSize;
  request.num_classes = 10;
  request.gpu_decode_arena_bytes = 1 << 20;
  return request;
}

// A deferred header that a ring of Request() may carry: a 200 x 100 JPEG of 1000 bytes.
DeferredSampleHeader GoodHeader() {
  DeferredSampleHeader header;
  std::memset(&header, 0, sizeof(header));
  header.magic = kDeferredMagic;
  header.version = kDeferredVersion;
  header.encoded_bytes = 1000;
  header.width = 200;
  header.height = 100;
  header.x = DeferredAxis{0.0, 1.5, 0, kImageSize, 10, 110};
  header.y = DeferredAxis{0.0, 1.2, 0, kImageSize, 0, 100};
  return header;
}

// A slot of four samples in memory the test owns, standing for the ring: sample 1 is
// deferred with GoodHeader().
struct FakeSlot {
  std::vector<uint8_t> images = std::vector<uint8_t>(kSampleBytes * 4);
  std::vector<int32_t> labels = {1, 2, 3, 4};
  std::vector<int64_t> indices = {10, 20, 30, 40};
  std::vector<uint8_t> kinds = {0, 1, 0, 0};

  FakeSlot() { SetHeader(1, GoodHeader()); }
  void SetHeader(int i, const DeferredSampleHeader& header) {
    std::memcpy(images.data() + kSampleBytes * i, &header, sizeof(header));
  }
  ReadableSlot View() const {
    ReadableSlot slot;
    slot.slot = 0;
    slot.count = 4;
    slot.images = images.data();
    slot.labels = labels.data();
    slot.sample_indices = indices.data();
    slot.sample_kinds = kinds.data();
    slot.deferred_count = 1;
    return slot;
  }
};

TEST(CopySlotContentsTest, TheCopyDoesNotChangeWhenTheRingIsRewritten) {
  FakeSlot ring;
  PrivateSlot copy;
  ASSERT_TRUE(CopySlotContents(Request(), ring.View(), copy).ok());
  // A writer rewrites the slot after the check: labels out of range, another header.
  ring.labels = {-1, 99, 1 << 30, -5};
  ring.indices = {-1, -1, -1, -1};
  ring.kinds = {7, 7, 7, 7};
  DeferredSampleHeader huge = GoodHeader();
  huge.encoded_bytes = 0xFFFFFFFF;
  huge.width = 1 << 30;
  ring.SetHeader(1, huge);
  EXPECT_EQ(copy.labels, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(copy.sample_indices, (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(copy.sample_kinds, (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(copy.deferred_count, 1);
  EXPECT_EQ(copy.deferred_headers[1].encoded_bytes, 1000u);
  EXPECT_EQ(copy.deferred_headers[1].width, 200);
}

TEST(CopySlotContentsTest, RefusesLabelsOutOfRangeAndNegativeIndices) {
  FakeSlot ring;
  PrivateSlot copy;
  ring.labels[2] = 10;
  EXPECT_THAT(CopySlotContents(Request(), ring.View(), copy),
              StatusIs(absl::StatusCode::kOutOfRange));
  ring.labels[2] = -1;
  EXPECT_THAT(CopySlotContents(Request(), ring.View(), copy),
              StatusIs(absl::StatusCode::kOutOfRange));
  ring.labels[2] = 3;
  ring.indices[3] = -2;
  EXPECT_THAT(CopySlotContents(Request(), ring.View(), copy),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(CopySlotContentsTest, RefusesUnknownKindsAndAWrongDeferredCount) {
  FakeSlot ring;
  PrivateSlot copy;
  ring.kinds[0] = 2;
  EXPECT_THAT(CopySlotContents(Request(), ring.View(), copy),
              StatusIs(absl::StatusCode::kOutOfRange));
  ring.kinds[0] = 0;
  ReadableSlot view = ring.View();
  view.deferred_count = 0;
  EXPECT_THAT(CopySlotContents(Request(), view, copy), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(CheckDeferredHeaderTest, AcceptsAHeaderThatFitsTheRingAndTheArena) {
  EXPECT_TRUE(CheckDeferredHeader(GoodHeader(), Request()).ok());
}

TEST(CheckDeferredHeaderTest, RefusesWhatTheDecoderMustNotTrust) {
  const RingRequest request = Request();
  auto refused = [&](auto&& edit) {
    DeferredSampleHeader header = GoodHeader();
    edit(header);
    return absl::IsOutOfRange(CheckDeferredHeader(header, request));
  };
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.magic = 0; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.version = 99; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.encoded_bytes = 0; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) {
    h.encoded_bytes = static_cast<uint32_t>(kSampleBytes - sizeof(h) + 1);
  }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.x.out_size = kImageSize + 1; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.width = 0; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.height = -4; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.x.clip_end = 201; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.y.clip_begin = -1; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.x.scale = 0.0; }));
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) { h.flip = 2; }));
  // 1 MiB of arena: 600 x 600 pixels (1800-byte rows padded to 2048) decode to 1.2 MB.
  EXPECT_TRUE(refused([](DeferredSampleHeader& h) {
    h.width = 600;
    h.height = 600;
    h.x.clip_end = 600;
    h.y.clip_end = 600;
  }));
}

TEST(CheckDeferredHeaderTest, AnArenaOfZeroMeansTheDefault) {
  RingRequest request = Request();
  request.gpu_decode_arena_bytes = 0;
  DeferredSampleHeader header = GoodHeader();
  header.width = 4096;
  header.height = 4096;
  EXPECT_TRUE(CheckDeferredHeader(header, request).ok());
  header.height = 4096 * 8;
  EXPECT_THAT(CheckDeferredHeader(header, request), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(DeferredDecodedBytesTest, PadsRowsTo256Bytes) {
  EXPECT_EQ(DeferredDecodedBytes(1, 1), 256u);
  EXPECT_EQ(DeferredDecodedBytes(100, 10), 512u * 10);
  EXPECT_EQ(DeferredDecodedBytes(4096, 4096), uint64_t{4096} * 3 * 4096);
  EXPECT_EQ(DeferredDecodedBytes(0, 5), 0u);
}

}  // namespace
}  // namespace stoker::data_service::internal
