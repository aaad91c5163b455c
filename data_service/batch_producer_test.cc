// Tests of BatchProducer: batches follow the sampler in (epoch, step) order with the
// dataset's labels and bytes, epochs queue back to back and the next epoch's first batch
// is ready at the boundary, the bytes do not depend on the thread count (also for real
// JPEGs, and with bad files replaced), packed and folder datasets give identical batches,
// bad requests and failing samples are reported, and the ring is unlinked.
#include "data_service/batch_producer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "data_service/dataset/bad_samples.h"
#include "data_service/dataset/image_folder_dataset.h"
#include "data_service/dataset/packed_dataset.h"
#include "data_service/dataset/packed_writer.h"
#include "data_service/dataset/sampler.h"
#include "data_service/dataset/synthetic_dataset.h"
#include "data_service/dataset/testing/forwarding_dataset.h"
#include "data_service/ring/ring.h"
#include "data_service/test_util.h"
#include "gtest/gtest.h"

namespace stoker::data_service {
namespace {

using ::stoker::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

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
  return test_util::TrainRequest(rank, world, /*batch_size=*/4, /*image_size=*/8);
}

struct Received {
  int64_t epoch, step;
  std::vector<int64_t> indices;
  std::vector<int32_t> labels;
  std::vector<uint8_t> images;
};

// The errors a producer reports, from whichever thread reports them. Thread-safe.
class ReportedErrors {
 public:
  BatchProducer::ErrorCallback Callback() {
    return [this](const absl::Status& s) {
      absl::MutexLock lock(&mu_);
      errors_.push_back(s);
    };
  }
  std::vector<absl::Status> errors() {
    absl::MutexLock lock(&mu_);
    return errors_;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(mu_);
};

// Reads `batches` batches from the ring of `producer`.
std::vector<Received> Drain(const BatchProducer& producer, int64_t batches) {
  std::vector<Received> received;
  auto segment = SharedMemorySegment::Open(producer.segment_name());
  EXPECT_OK(segment);
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  EXPECT_OK(consumer);
  const size_t image_bytes =
      producer.layout().batch_image_bytes / producer.layout().geometry.batch_size;
  for (int64_t b = 0; b < batches; ++b) {
    auto slot = consumer->Acquire(absl::Seconds(20));
    EXPECT_OK(slot);
    if (!slot.ok()) break;
    Received r{slot->epoch, slot->step,
               std::vector<int64_t>(slot->sample_indices, slot->sample_indices + slot->count),
               std::vector<int32_t>(slot->labels, slot->labels + slot->count),
               std::vector<uint8_t>(slot->images, slot->images + image_bytes * slot->count)};
    received.push_back(std::move(r));
    EXPECT_OK(consumer->Release(slot->slot));
  }
  EXPECT_THAT(consumer->Acquire(absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  return received;
}

std::unique_ptr<BatchProducer> Make(std::shared_ptr<const Dataset> dataset, WorkerPool* pool,
                                    const RingRequest& request, std::string name = SegmentName(),
                                    BatchProducer::ErrorCallback on_error = nullptr,
                                    BadSampleTracker* bad_samples = nullptr) {
  if (!on_error) {
    on_error = [](const absl::Status& s) { ADD_FAILURE() << "unexpected error: " << s; };
  }
  BatchProducerOptions options{name, request, 2};
  options.bad_samples = bad_samples;
  auto producer = BatchProducer::Create(options, std::move(dataset), pool, std::move(on_error));
  EXPECT_OK(producer);
  return producer.ok() ? std::move(*producer) : nullptr;
}

TEST(BatchProducerTest, DeliversTheSamplersIndicesWithTheDatasetsLabelsAndBytes) {
  WorkerPool pool(3);
  auto dataset = Synthetic();
  const RingRequest request = Request(1, 2);
  auto producer = Make(dataset, &pool, request);
  ASSERT_NE(producer, nullptr);
  auto info = producer->QueueEpoch(0, 77);
  ASSERT_OK(info);
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
      SampleScratch scratch;
      ASSERT_OK(dataset->Load(index, {8, true, 77, 0}, scratch, image.data()));
      EXPECT_TRUE(
          std::equal(image.begin(), image.end(), batches[b].images.begin() + i * image.size()))
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
  ASSERT_OK(info);
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
    EXPECT_THAT(producer, StatusIs(absl::StatusCode::kInvalidArgument)) << c.field;
    EXPECT_NE(producer.status().message().find(c.field), std::string::npos) << producer.status();
    EXPECT_FALSE(SegmentExists(name));
  }
  RingRequest huge = Request();
  huge.batch_size = kMaxBatchSize;
  huge.image_size = kMaxImageSize;
  const std::string name = SegmentName();
  auto producer = BatchProducer::Create({name, huge, 2}, dataset, &pool, on_error);
  EXPECT_THAT(producer, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("/dev/shm")));
  EXPECT_FALSE(SegmentExists(name));
}

TEST(BatchProducerTest, AnEpochStartedMidwayDeliversTheRestOfItsOrderFromStepZero) {
  WorkerPool pool(2);
  auto dataset = Synthetic();  // 53 samples
  const RingRequest request = Request(2, 3);
  auto producer = Make(dataset, &pool, request);
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(producer->dataset_size(), 53);
  // 20 samples of epoch 4's global order consumed (by a run of another world size): rank 2
  // of 3 takes positions 22, 25, ..., 53 (54 wraps to the epoch's first sample).
  auto info = producer->QueueEpoch(4, 6, 20);
  ASSERT_OK(info);
  EXPECT_EQ(info->samples, 11);  // ceil(33 / 3)
  EXPECT_EQ(info->batches, 3);   // ceil(11 / 4)
  auto sampler = DistributedSampler::Create({53, 3, 2, true, false});
  ASSERT_OK(sampler);
  auto expected = sampler->RestOfEpochIndices(6, 4, 20);
  ASSERT_OK(expected);
  std::vector<int64_t> got;
  const std::vector<Received> batches = Drain(*producer, info->batches);
  for (size_t b = 0; b < batches.size(); ++b) {
    EXPECT_EQ(batches[b].epoch, 4);
    EXPECT_EQ(batches[b].step, static_cast<int64_t>(b));
    got.insert(got.end(), batches[b].indices.begin(), batches[b].indices.end());
  }
  EXPECT_EQ(got, *expected);
  EXPECT_THAT(producer->QueueEpoch(5, 6, 53),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position 53")));
}

TEST(BatchProducerTest, EpochsMustBeNonNegativeAndIncreasing) {
  WorkerPool pool(1);
  auto producer = Make(Synthetic(), &pool, Request());
  ASSERT_NE(producer, nullptr);
  EXPECT_THAT(producer->QueueEpoch(-1, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(producer->QueueEpoch(2, 0));
  EXPECT_THAT(producer->QueueEpoch(2, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(producer->QueueEpoch(1, 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Fails on one index, otherwise delegates.
class FailingDataset final : public test_util::ForwardingDataset {
 public:
  FailingDataset(std::shared_ptr<const Dataset> base, int64_t bad)
      : ForwardingDataset(std::move(base)), bad_(bad) {}
  absl::Status Load(int64_t index, const SampleOptions& options, SampleScratch& scratch,
                    uint8_t* dst) const override {
    if (index == bad_) return absl::InvalidArgumentError("corrupt image");
    return ForwardingDataset::Load(index, options, scratch, dst);
  }

 private:
  int64_t bad_;
};

TEST(BatchProducerTest, AFailingSampleStopsProductionAndIsReportedByName) {
  WorkerPool pool(2);
  ReportedErrors reported;
  auto dataset = std::make_shared<FailingDataset>(Synthetic(30), 17);
  auto producer = Make(dataset, &pool, Request(), SegmentName(), reported.Callback());
  ASSERT_NE(producer, nullptr);
  ASSERT_OK(producer->QueueEpoch(0, 3));
  auto segment = SharedMemorySegment::Open(producer->segment_name());
  ASSERT_OK(segment);
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  ASSERT_OK(consumer);
  // Consume until production stops.
  while (true) {
    auto slot = consumer->Acquire(absl::Seconds(2));
    if (!slot.ok()) break;
    for (int i = 0; i < slot->count; ++i) EXPECT_NE(slot->sample_indices[i], 17);
    ASSERT_OK(consumer->Release(slot->slot));
  }
  const std::vector<absl::Status> errors = reported.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], StatusIs(absl::StatusCode::kInvalidArgument,
                                  AllOf(HasSubstr("sample 17"), HasSubstr("corrupt image"),
                                        HasSubstr("rank 0, epoch 0"))));
  EXPECT_THAT(producer->QueueEpoch(1, 3), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(BatchProducerTest, DestroyingAProducerBlockedOnAFullRingUnlinksTheRing) {
  WorkerPool pool(2);
  const std::string name = SegmentName();
  auto producer = Make(Synthetic(200), &pool, Request(), name);
  ASSERT_NE(producer, nullptr);
  ASSERT_OK(producer->QueueEpoch(0, 1));  // 50 batches into 3 slots: it blocks
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(SegmentExists(name));
  const absl::Time start = absl::Now();
  producer.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_FALSE(SegmentExists(name));
}

// An ImageFolder of photo-like JPEGs (and a PNG) in `classes` classes, plus, in class 0,
// the unusable files `bad` (test_util::WriteBadImageFiles' names) when asked for.
std::string JpegFolder(const std::string& name, int per_class, int classes = 3,
                       bool with_bad_files = false) {
  const std::string root = test_util::TestDirectory(name);
  std::filesystem::remove_all(root);
  for (int c = 0; c < classes; ++c) {
    const std::string dir = absl::StrCat(root, "/class", c);
    std::filesystem::create_directories(dir);
    for (int i = 0; i < per_class; ++i) {
      const int width = 40 + 7 * ((i + c) % 5), height = 30 + 5 * ((i * 3 + c) % 4);
      const std::vector<uint8_t> rgb = test_util::PhotoLikeImage(width, height, c * 1000 + i);
      const std::string path = absl::StrCat(dir, "/img", i, i % 7 == 3 ? ".png" : ".jpg");
      EXPECT_OK(i % 7 == 3 ? test_util::WritePng(path, width, height, rgb)
                           : test_util::WriteJpeg(path, width, height, rgb, 90));
    }
  }
  if (with_bad_files) {
    EXPECT_OK(test_util::WriteBadImageFiles(root + "/class0"));
  }
  return root;
}

std::shared_ptr<const Dataset> OpenFolder(const std::string& root) {
  auto dataset = ImageFolderDataset::Open(root);
  EXPECT_OK(dataset);
  return std::shared_ptr<const Dataset>(std::move(*dataset));
}

std::shared_ptr<const Dataset> OpenPacked(const std::string& folder, const std::string& name) {
  const std::string index = test_util::TestDirectory("packed_" + name) + "/" + name + ".stkpack";
  PackOptions options;
  options.shard_bytes = 20000;
  auto stats = PackImageFolder(folder, index, options);
  EXPECT_OK(stats);
  auto dataset = PackedDataset::Open(index);
  EXPECT_OK(dataset);
  return std::shared_ptr<const Dataset>(std::move(*dataset));
}

RingRequest JpegRequest(bool train = true) {
  RingRequest request;
  request.batch_size = 8;
  request.image_size = 24;
  request.slot_count = 3;
  request.train = train;
  return request;
}

// Two epochs of `dataset` through a fresh producer on a pool of `threads`.
std::vector<Received> TwoEpochs(std::shared_ptr<const Dataset> dataset, int threads,
                                const RingRequest& request, BadSampleTracker* bad = nullptr) {
  WorkerPool pool(threads);
  auto producer = Make(dataset, &pool, request, SegmentName(), nullptr, bad);
  if (producer == nullptr) return {};
  auto a = producer->QueueEpoch(0, 31);
  auto b = producer->QueueEpoch(1, 31);
  EXPECT_TRUE(a.ok() && b.ok());
  return Drain(*producer, a->batches + b->batches);
}

void ExpectIdentical(const std::vector<Received>& x, const std::vector<Received>& y) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t b = 0; b < x.size(); ++b) {
    EXPECT_EQ(x[b].epoch, y[b].epoch);
    EXPECT_EQ(x[b].step, y[b].step);
    EXPECT_EQ(x[b].indices, y[b].indices) << "batch " << b;
    EXPECT_EQ(x[b].labels, y[b].labels) << "batch " << b;
    EXPECT_TRUE(x[b].images == y[b].images) << "batch " << b << " images differ";
  }
}

TEST(BatchProducerTest, JpegBatchesAreBitIdenticalWithOneOrThreeThreads) {
  auto dataset = OpenFolder(JpegFolder("threads_jpegs", 9));
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "validation");
    std::vector<Received> one = TwoEpochs(dataset, 1, JpegRequest(train));
    std::vector<Received> three = TwoEpochs(dataset, 3, JpegRequest(train));
    ASSERT_EQ(one.size(), 8u);  // 27 samples: 4 batches per epoch
    ExpectIdentical(one, three);
    // The samples are the dataset's decoded images, not zeros.
    SampleScratch scratch;
    std::vector<uint8_t> image(24 * 24 * 3);
    const int64_t index = one[5].indices[2];
    ASSERT_OK(dataset->Load(index, {24, train, 31, one[5].epoch}, scratch, image.data()));
    EXPECT_TRUE(std::equal(image.begin(), image.end(), one[5].images.begin() + 2 * image.size()));
    if (train) {
      EXPECT_NE(one[0].images, one[4].images) << "epochs draw new crops";
    }
  }
}

TEST(BatchProducerTest, PackedAndFolderDatasetsGiveIdenticalBatches) {
  const std::string folder = JpegFolder("packed_vs_folder", 7, 3, /*with_bad_files=*/true);
  auto unpacked = OpenFolder(folder);
  auto packed = OpenPacked(folder, "packed_vs_folder");
  ASSERT_EQ(packed->size(), unpacked->size());
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "validation");
    BadSampleOptions options;
    options.max_fraction = 1.0;
    BadSampleTracker bad_unpacked(options, unpacked->size(), nullptr);
    BadSampleTracker bad_packed(options, packed->size(), nullptr);
    std::vector<Received> a = TwoEpochs(unpacked, 2, JpegRequest(train), &bad_unpacked);
    std::vector<Received> b = TwoEpochs(packed, 2, JpegRequest(train), &bad_packed);
    ASSERT_FALSE(a.empty());
    ExpectIdentical(a, b);
    EXPECT_EQ(bad_unpacked.stats().bad_files, 5);
    EXPECT_EQ(bad_packed.stats().bad_files, 5);
  }
}

TEST(BatchProducerTest, TheNextEpochsFirstBatchIsReadyWhenTheCurrentEpochEnds) {
  auto dataset = OpenFolder(JpegFolder("boundary_jpegs", 8, 2));  // 16 samples
  WorkerPool pool(2);
  RingRequest request = JpegRequest();
  request.batch_size = 4;
  request.slot_count = 3;
  auto producer = Make(dataset, &pool, request);
  ASSERT_NE(producer, nullptr);
  auto segment = SharedMemorySegment::Open(producer->segment_name());
  ASSERT_OK(segment);
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  ASSERT_OK(consumer);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    if (epoch == 0) {
      ASSERT_OK(producer->QueueEpoch(0, 5));
    }
    for (int64_t step = 0; step < 4; ++step) {
      // Every batch after the very first must already be published: no stall, not even
      // at the epoch boundary.
      auto slot =
          consumer->Acquire(epoch == 0 && step == 0 ? absl::Seconds(20) : absl::ZeroDuration());
      ASSERT_OK(slot) << "epoch " << epoch << " step " << step << ": " << slot.status();
      EXPECT_EQ(slot->epoch, epoch);
      EXPECT_EQ(slot->step, step);
      // As the trainer does: ask for the next epoch at the start of this one.
      if (step == 0) {
        ASSERT_OK(producer->QueueEpoch(epoch + 1, 5));
      }
      absl::SleepFor(absl::Milliseconds(400));  // the training step
      ASSERT_OK(consumer->Release(slot->slot));
    }
  }
}

// Captures what this process writes to stderr (the service's log) between construction
// and Text().
class StderrCapture {
 public:
  StderrCapture() {
    path_ = test_util::TestDirectory("stderr") + "/" + test_util::UniqueId() + ".log";
    saved_ = dup(STDERR_FILENO);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~StderrCapture() { Restore(); }
  std::string Text() {
    Restore();
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

int Occurrences(const std::string& text, const std::string& word) {
  int count = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++count;
  return count;
}

TEST(BatchProducerTest, BadFilesAreReplacedByTheNextUsableSampleOfTheEpoch) {
  const std::string folder = JpegFolder("bad_jpegs", 6, 2, /*with_bad_files=*/true);
  ASSERT_EQ(mkfifo((folder + "/class1/fifo.jpg").c_str(), 0600), 0);
  ASSERT_EQ(symlink((folder + "/nowhere.jpg").c_str(), (folder + "/class1/dangling.jpg").c_str()),
            0);
  auto dataset = OpenFolder(folder);  // 12 good + 5 bad in class0, 2 bad in class1
  ASSERT_EQ(dataset->size(), 19);
  const std::set<std::string> bad_names = {"corrupt.jpg", "truncated.jpg", "empty.jpg",
                                           "text.jpg",    "bomb.jpg",      "fifo.jpg",
                                           "dangling.jpg"};
  auto is_bad = [&](int64_t index) {
    const std::string description = dataset->Describe(index);
    for (const std::string& name : bad_names) {
      if (absl::StrContains(description, "/" + name)) return true;
    }
    return false;
  };
  BadSampleOptions options;
  options.max_fraction = 0.5;
  options.min_samples = 1;
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "training" : "validation");
    std::vector<std::vector<Received>> runs;
    std::vector<BadSampleStats> stats;
    std::string log;
    for (int threads : {1, 3}) {
      BadSampleTracker bad(options, dataset->size(), nullptr);
      StderrCapture capture;
      runs.push_back(TwoEpochs(dataset, threads, JpegRequest(train), &bad));
      log = capture.Text();
      stats.push_back(bad.stats());
    }
    ExpectIdentical(runs[0], runs[1]);
    ASSERT_EQ(runs[0].size(), 6u);  // 19 samples: batches of 8, 8, 3, per epoch
    auto sampler = DistributedSampler::Create({19, 1, 0, train, false});
    int64_t replaced = 0;
    for (const Received& batch : runs[0]) {
      const std::vector<int64_t> order = sampler->EpochIndices(31, batch.epoch);
      EXPECT_EQ(batch.indices.size(), batch.step < 2 ? 8u : 3u) << "batches stay full";
      for (size_t i = 0; i < batch.indices.size(); ++i) {
        const int64_t position = batch.step * 8 + i;
        const int64_t delivered = batch.indices[i];
        EXPECT_FALSE(is_bad(delivered)) << dataset->Describe(delivered);
        EXPECT_EQ(batch.labels[i], dataset->Label(delivered));
        // The first usable sample at or after this position of the epoch's order.
        int64_t expected = -1;
        for (int64_t k = 0; k < 19 && expected < 0; ++k) {
          const int64_t candidate = order[(position + k) % 19];
          if (!is_bad(candidate)) expected = candidate;
        }
        EXPECT_EQ(delivered, expected) << "epoch " << batch.epoch << " position " << position;
        if (delivered != order[position]) ++replaced;
      }
    }
    EXPECT_EQ(replaced, 14) << "7 bad files, twice";
    for (const BadSampleStats& s : stats) {
      EXPECT_EQ(s.samples_seen, 38);
      EXPECT_EQ(s.samples_skipped, 14);
      EXPECT_EQ(s.bad_files, 7);
    }
    // One warning per file, naming it, however many epochs and threads.
    for (const std::string& name : bad_names) {
      EXPECT_EQ(Occurrences(log, "/" + name + ")"), 1) << name << "\n" << log;
    }
  }
}

TEST(BatchProducerTest, WithBadFilesFailTheFirstUnusableSampleStopsProductionNamingItsFile) {
  const std::string folder = JpegFolder("fail_jpegs", 4, 1);
  ASSERT_OK(test_util::WriteFileBytes(folder + "/class0/img2.jpg", {0xff, 0xd8, 0xff, 0x00}));
  auto dataset = OpenFolder(folder);
  BadSampleOptions options;
  options.policy = BadFilePolicy::kFail;
  BadSampleTracker bad(options, dataset->size(), nullptr);
  WorkerPool pool(2);
  ReportedErrors reported;
  RingRequest request = JpegRequest(false);
  request.batch_size = 1;
  auto producer = Make(dataset, &pool, request, SegmentName(), reported.Callback(), &bad);
  ASSERT_NE(producer, nullptr);
  ASSERT_OK(producer->QueueEpoch(0, 1));
  auto segment = SharedMemorySegment::Open(producer->segment_name());
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  ASSERT_OK(consumer);
  std::vector<int64_t> delivered;
  while (true) {
    auto slot = consumer->Acquire(absl::Seconds(2));
    if (!slot.ok()) break;
    delivered.push_back(slot->sample_indices[0]);
    ASSERT_OK(consumer->Release(slot->slot));
  }
  EXPECT_EQ(delivered, (std::vector<int64_t>{0, 1}));  // validation order; index 2 is bad
  const std::vector<absl::Status> errors = reported.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0],
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("class0/img2.jpg"), HasSubstr("--bad_files=fail"))));
}

TEST(BatchProducerTest, TooManyBadFilesStopProductionWithACount) {
  const std::string folder = JpegFolder("many_bad_jpegs", 3, 1, /*with_bad_files=*/true);
  auto dataset = OpenFolder(folder);  // 3 good, 5 bad
  BadSampleOptions options;
  options.max_fraction = 0.2;
  options.min_samples = 8;
  BadSampleTracker bad(options, dataset->size(), nullptr);
  WorkerPool pool(2);
  ReportedErrors reported;
  auto producer = Make(dataset, &pool, JpegRequest(), SegmentName(), reported.Callback(), &bad);
  ASSERT_NE(producer, nullptr);
  ASSERT_OK(producer->QueueEpoch(0, 1));
  auto segment = SharedMemorySegment::Open(producer->segment_name());
  auto consumer = RingConsumer::Attach(segment->data(), segment->size());
  ASSERT_OK(consumer);
  EXPECT_THAT(consumer->Acquire(absl::Seconds(2)), StatusIs(absl::StatusCode::kDeadlineExceeded));
  const std::vector<absl::Status> errors = reported.errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], StatusIs(absl::StatusCode::kDataLoss, HasSubstr("--max_bad_fraction")));
}

}  // namespace
}  // namespace stoker::data_service
