// libFuzzer target for the ring the trainer reads from shared memory: whatever bytes a
// segment holds, RingConsumer::Attach() either refuses them (DataLoss) or gives a consumer
// whose layout fits the segment, and every slot it acquires lies inside the segment (its
// images, labels, sample indices and kinds), with a count within the batch size; Acquire
// fails only as documented, and releasing an acquired slot succeeds. Built as
// //fuzz:ring_header_fuzzer; tools/fuzz.sh runs it under libFuzzer with ASan and UBSan. With
// STOKER_FUZZ_WRITE_SEEDS=DIR it writes its seed corpus (rings a producer initialised and filled)
// into DIR and exits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "data_service/ring/ring.h"
#include "fuzz/seed_files.h"

namespace stoker::data_service {
namespace {

constexpr size_t kMaxSegmentBytes = 1 << 20;
constexpr size_t kPage = 4096;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "ring_header_fuzzer: %s\n", what);
  std::abort();
}

// A page-aligned, zero-padded copy of `size` bytes, as a mapping of the segment is.
struct Segment {
  explicit Segment(size_t size) : bytes(size) {
    const size_t padded = std::max(kPage, (size + kPage - 1) / kPage * kPage);
    base = static_cast<uint8_t*>(std::aligned_alloc(kPage, padded));
    std::memset(base, 0, padded);
  }
  ~Segment() { std::free(base); }
  uint8_t* base = nullptr;
  size_t bytes = 0;
};

bool Inside(const Segment& s, const void* p, uint64_t length) {
  const auto* at = static_cast<const uint8_t*>(p);
  return at >= s.base && at <= s.base + s.bytes &&
         length <= static_cast<uint64_t>(s.base + s.bytes - at);
}

void CheckSlot(const Segment& s, const RingLayout& layout, const ReadableSlot& slot) {
  const RingGeometry& g = layout.geometry;
  if (slot.slot < 0 || slot.slot >= g.slot_count) Fail("a slot index outside the ring");
  if (slot.count < 1 || slot.count > g.batch_size) Fail("a slot count outside 1..batch_size");
  if (slot.deferred_count < 0 || slot.deferred_count > slot.count) Fail("deferred_count > count");
  const uint64_t n = static_cast<uint64_t>(slot.count);
  if (!Inside(s, slot.images, layout.batch_image_bytes)) Fail("images outside the segment");
  if (!Inside(s, slot.labels, n * sizeof(int32_t))) Fail("labels outside the segment");
  if (!Inside(s, slot.sample_indices, n * sizeof(int64_t))) Fail("indices outside the segment");
  if (!Inside(s, slot.sample_kinds, n)) Fail("kinds outside the segment");
  // Touch what a reader reads, for the sanitizers.
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    sum += static_cast<uint32_t>(slot.labels[i]) + static_cast<uint64_t>(slot.sample_indices[i]) +
           slot.sample_kinds[i];
  }
  sum += slot.images[0] + slot.images[layout.batch_image_bytes - 1];
  if (sum == 0xfeedfacecafebeefULL)
    std::fprintf(stderr, "%llu\n", static_cast<unsigned long long>(sum));
}

void WriteSeeds(const std::string& dir) {
  const RingGeometry geometries[] = {{1, 1, 1}, {2, 3, 4}, {3, 4, 8}, {4, 2, 16}};
  int written = 0;
  for (const RingGeometry& g : geometries) {
    absl::StatusOr<RingLayout> layout = RingLayout::For(g);
    if (!layout.ok()) Fail("a seed geometry has no layout");
    for (int published = 0; published <= 2 && published <= g.slot_count; ++published) {
      Segment segment(layout->total_bytes);
      absl::StatusOr<RingProducer> producer =
          RingProducer::Initialize(segment.base, segment.bytes, g);
      if (!producer.ok()) Fail("a seed ring did not initialise");
      for (int p = 0; p < published; ++p) {
        absl::StatusOr<WritableSlot> slot = producer->Claim(absl::ZeroDuration());
        if (!slot.ok()) Fail("a seed slot could not be claimed");
        for (int i = 0; i < g.batch_size; ++i) {
          slot->labels[i] = i;
          slot->sample_indices[i] = 100 * p + i;
        }
        std::memset(slot->images, 7 + p, layout->batch_image_bytes);
        if (!producer->Publish(*slot, /*epoch=*/p, /*step=*/p, g.batch_size).ok()) {
          Fail("a seed slot could not be published");
        }
      }
      fuzz::WriteSeedFile(
          dir, "ring_" + std::to_string(written++),
          absl::string_view(reinterpret_cast<const char*>(segment.base), segment.bytes));
    }
  }
}

const bool kSeedsWritten = fuzz::WriteSeedsIfAsked(&WriteSeeds);

}  // namespace
}  // namespace stoker::data_service

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::data_service;
  if (size > kMaxSegmentBytes) return -1;  // not added to the corpus
  Segment segment(size);
  if (size > 0) std::memcpy(segment.base, data, size);
  absl::StatusOr<RingConsumer> consumer = RingConsumer::Attach(segment.base, segment.bytes);
  if (!consumer.ok()) {
    if (consumer.status().code() != absl::StatusCode::kDataLoss) Fail("Attach: not DataLoss");
    return 0;
  }
  const RingLayout& layout = consumer->layout();
  if (layout.total_bytes > segment.bytes) Fail("an attached layout larger than the segment");
  std::vector<int32_t> held;
  for (int i = 0; i < layout.geometry.slot_count + 1; ++i) {
    absl::StatusOr<ReadableSlot> slot = consumer->Acquire(absl::ZeroDuration());
    if (!slot.ok()) {
      // Nothing published, inconsistent metadata, or every slot held (by this loop).
      const absl::StatusCode code = slot.status().code();
      const bool all_held = static_cast<int>(held.size()) == layout.geometry.slot_count;
      if (code != absl::StatusCode::kDeadlineExceeded && code != absl::StatusCode::kDataLoss &&
          !(code == absl::StatusCode::kFailedPrecondition && all_held)) {
        std::fprintf(stderr, "%s\n", slot.status().ToString().c_str());
        Fail("Acquire: an unexpected error");
      }
      break;
    }
    CheckSlot(segment, layout, *slot);
    held.push_back(slot->slot);
  }
  for (int32_t slot : held) {
    if (!consumer->Release(slot).ok()) Fail("releasing an acquired slot failed");
  }
  return 0;
}
